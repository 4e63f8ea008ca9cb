"""Settings of the local provider, read from the environment only when it is opened."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from mango.local.layout import SANDBOX_DIR_ENV
from mango.local.provider import LocalProvider
from mango.provider import (
    MAX_OUTPUT_BYTES_ENV,
    MAX_OUTPUT_BYTES_SETTING,
    ConfigurationError,
    ProviderContext,
    SettingSpec,
    max_output_bytes,
    state_dir,
)

__all__ = [
    "MAX_OUTPUT_BYTES_ENV",
    "SANDBOX_DIR_ENV",
    "SETTINGS",
    "STATE_DIR_ENV",
    "LocalSettings",
    "open_local_provider",
    "read_local_settings",
]

STATE_DIR_ENV = "MANGO_STATE_DIR"

SETTINGS = (
    SettingSpec(
        env=SANDBOX_DIR_ENV,
        description=(
            "absolute directory holding one sub-directory per Session "
            "(default: <state dir>/sandboxes; the state dir is $MANGO_STATE_DIR, "
            "/var/lib/mango for root, else the user state directory)"
        ),
    ),
    MAX_OUTPUT_BYTES_SETTING,
)
"""The settings the local provider reads, as its registration declares them."""


@attrs.frozen
class LocalSettings:
    """The local provider's settings, validated."""

    sandbox_dir: Path
    max_output_bytes: int


def _absolute_dir(name: str, value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute():
        # A relative directory would move with the worker's cwd and orphan
        # every sandbox reference persisted before a restart.
        raise ConfigurationError(f"{name} must be an absolute path, got {value!r}")
    return path


def read_local_settings(environ: Mapping[str, str] | None = None) -> LocalSettings:
    """Read and validate the settings from ``environ`` (default: ``os.environ``).

    Raises :class:`ConfigurationError` naming the variable at fault. Empty
    values count as unset.
    """
    env = os.environ if environ is None else environ
    sandbox_dir_text = env.get(SANDBOX_DIR_ENV, "")
    if sandbox_dir_text:
        sandbox_dir = _absolute_dir(SANDBOX_DIR_ENV, sandbox_dir_text)
    else:
        sandbox_dir = state_dir(env) / "sandboxes"
    return LocalSettings(sandbox_dir=sandbox_dir, max_output_bytes=max_output_bytes(env))


def open_local_provider(
    context: ProviderContext, environ: Mapping[str, str] | None = None
) -> LocalProvider:
    """The registration's factory: a :class:`LocalProvider` in ``context``'s namespace."""
    settings = read_local_settings(environ)
    return LocalProvider(
        settings.sandbox_dir,
        max_output_bytes=settings.max_output_bytes,
        namespace=context.namespace,
    )
