"""The inputs and outputs of the resource activities (File Resources, outputs, the Files store).

Like :mod:`mango.temporal.messages`: one attrs input and one attrs output per
activity, JSON through the one edge converter, fields added only with
defaults so recorded histories keep replaying.
"""

from __future__ import annotations

from typing import Any

import attrs

from mango.app.converter import converter
from mango.domain.errors import InvalidInput
from mango.domain.values import SandboxSpec, validate_session_id

__all__ = [
    "MaterializeInput",
    "MaterializeOutput",
    "PublishOutputsInput",
    "PublishOutputsOutput",
    "ReconcileFilesInput",
    "ReconcileFilesOutput",
]


def _session_id(_instance: object, _attribute: object, value: Any) -> None:
    validate_session_id(value)


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidInput(f"{attribute.name} must be a positive number, got {value!r}")


def _non_negative(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidInput(f"{attribute.name} must not be negative, got {value!r}")


@attrs.frozen
class MaterializeInput:
    """Bring the Session's bound sandbox's File Resources in line with its rows."""

    session_id: str = attrs.field(validator=_session_id)
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)


@attrs.frozen
class MaterializeOutput:
    """What the materialization did."""

    imported: int = 0
    present: int = 0
    removed: int = 0


@attrs.frozen
class PublishOutputsInput:
    """Publish the Session's outputs directory (never creating a sandbox)."""

    session_id: str = attrs.field(validator=_session_id)
    spec: SandboxSpec = attrs.field(factory=SandboxSpec)


@attrs.frozen
class PublishOutputsOutput:
    """What the publication did; ``ran`` is False when the Session had no sandbox."""

    ran: bool = False
    files: int = 0
    published: int = 0
    unchanged: int = 0
    removed: int = 0


@attrs.frozen
class ReconcileFilesInput:
    """One pass of the Files store's reconciler."""

    stale_after: float = attrs.field(default=3600.0, validator=_non_negative)
    """Seconds an upload (an output's included) may go unheard of before it is given up."""
    limit: int = attrs.field(default=1000, validator=_positive)


@attrs.frozen
class ReconcileFilesOutput:
    """What the pass did (see :class:`~mango.app.files.FileReconcileReport`)."""

    abandoned_uploads: int = 0
    removed_files: int = 0
    orphan_blobs: int = 0
    incomplete_puts: int = 0
    failures: tuple[tuple[str, str], ...] = ()


def warm_up() -> None:
    """Resolve hints and build the converter's hooks outside the workflow sandbox."""
    for cls in (
        MaterializeInput,
        MaterializeOutput,
        PublishOutputsInput,
        PublishOutputsOutput,
        ReconcileFilesInput,
        ReconcileFilesOutput,
    ):
        attrs.resolve_types(cls)
        converter.get_structure_hook(cls)
        converter.get_unstructure_hook(cls)
