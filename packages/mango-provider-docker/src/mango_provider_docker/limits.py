"""Resource limits of Docker sandboxes: ranges, parsing and the Engine's units.

A light module (no aiodocker, no aiohttp): the settings module, which the
plugin's entry point loads on every mango command, validates with it.
"""

from __future__ import annotations

import math

import attrs

from mango.provider import MAX_MEMORY_BYTES, InvalidInput, MemorySize

__all__ = [
    "MAX_CPUS",
    "MAX_MEMORY_BYTES",
    "MAX_PIDS_LIMIT",
    "MIN_CPUS",
    "MIN_MEMORY_BYTES",
    "MIN_PIDS_LIMIT",
    "Limits",
    "check_cpus",
    "check_memory",
    "check_pids_limit",
    "parse_memory",
]

MIN_MEMORY_BYTES = 6 * 1024 * 1024
"""The smallest memory limit the Docker Engine accepts."""
MIN_CPUS = 0.01
"""The smallest CPU limit: below it the kernel refuses the CFS quota; the container cannot start."""
MAX_CPUS = 1024.0
"""The largest CPU limit accepted; the Engine itself refuses more CPUs than the host has."""
MIN_PIDS_LIMIT = 16
"""The smallest pids limit. The init, the idle shell and its ``sleep`` hold three; every exec
briefly holds up to three more (runc's setns stages) before it becomes the command; a command
with a few children and the tree killer must fit beside them, or the sandbox cannot run a
command, or stop one (measured: at 8 the kill of a two-stage pipeline fails to start)."""
MAX_PIDS_LIMIT = 4 * 1024 * 1024
"""The largest pids limit: the kernel's ``PID_MAX_LIMIT``; ``pids.max`` refuses more."""


def check_memory(size: int) -> int:
    """The Engine's ``Memory`` for a size in bytes (``0``: no limit), checked against its range.

    The size comes parsed from mango's one memory grammar; the Engine takes
    bytes and refuses less than 6 MiB, so that is :class:`InvalidInput` here.
    """
    if size and size < MIN_MEMORY_BYTES:
        raise InvalidInput(
            f"memory limit of {size} bytes is below the Docker minimum of 6m "
            f"({MIN_MEMORY_BYTES} bytes)"
        )
    if size > MAX_MEMORY_BYTES:
        raise InvalidInput(f"memory limit of {size} bytes is above the maximum of 1p")
    return size


def parse_memory(text: str) -> int:
    """A memory setting (``512m``, ``1g``, ``1.5GiB``, ``2Gi``, ``1048576``) in bytes for Docker.

    mango's memory grammar (binary units, as the docker CLI reads them), where
    ``0`` means no limit. Raises :class:`InvalidInput` for anything else, or a
    limit outside 6 MiB to 1 PiB.
    """
    return check_memory(MemorySize.parse(text, allow_zero=True).bytes)


@attrs.frozen
class Limits:
    """Resource limits of one container; ``None`` leaves the daemon's default (none)."""

    memory_bytes: int | None = None
    nano_cpus: int | None = None
    pids_limit: int | None = None


def check_cpus(cpus: float) -> int | None:
    """The ``NanoCpus`` of a CPU limit; ``0`` means none (``None``).

    Raises :class:`InvalidInput` unless ``cpus`` is 0 or from 0.01 to 1024.
    """
    if (
        isinstance(cpus, bool)
        or not isinstance(cpus, int | float)
        or not math.isfinite(cpus)
        or not (cpus == 0 or MIN_CPUS <= cpus <= MAX_CPUS)
    ):
        raise InvalidInput(
            f"cpu limit must be 0 (none) or from {MIN_CPUS:g} to {MAX_CPUS:g} CPUs, got {cpus!r}"
        )
    return round(cpus * 1e9) or None


def check_pids_limit(pids_limit: int) -> int | None:
    """The ``PidsLimit`` of a pids limit; ``0`` means none (``None``).

    Raises :class:`InvalidInput` unless ``pids_limit`` is 0 or a whole number
    from :data:`MIN_PIDS_LIMIT` to :data:`MAX_PIDS_LIMIT`.
    """
    if (
        isinstance(pids_limit, bool)
        or not isinstance(pids_limit, int)
        or not (pids_limit == 0 or MIN_PIDS_LIMIT <= pids_limit <= MAX_PIDS_LIMIT)
    ):
        raise InvalidInput(
            f"pids limit must be 0 (none) or a whole number from {MIN_PIDS_LIMIT} to "
            f"{MAX_PIDS_LIMIT}, got {pids_limit!r}: a sandbox needs room for its init, its "
            "idle shell and the command's processes"
        )
    return pids_limit or None
