"""Limits shared by every provider: the grammar of memory and CPU sizes, and the byte bounds.

**Memory sizes** (``SandboxSpec.memory``, and the memory settings of the
providers that have one) follow one grammar, :data:`MEMORY_GRAMMAR`: a whole
number of bytes, or a number with a unit ``k``, ``m``, ``g``, ``t`` or ``p``
that may be followed by ``i`` and/or ``b``, in any case. Every unit is a
power of 1024, so the sizes Docker users write (``512m``, ``2g``,
``1.5GiB``) and the binary quantities Kubernetes and OpenSandbox users write
(``512Mi``, ``2Gi``) mean what they expect, and so do ``2G`` and ``64MB``
(binary, as Docker reads them). The largest size is ``1p`` (1 PiB).

**CPU counts** (``SandboxSpec.cpus``) follow :data:`CPUS_GRAMMAR`: a number
of CPUs (``2``, ``1.5``) or a string of millicores (``"500m"``), from
``0.001`` (``1m``) to ``1024``.

A size outside the grammar is an :class:`~mango.domain.errors.InvalidInput`
naming the value and the grammar, raised when the spec is built, so it is
refused before anything is provisioned on any provider. Each provider then
translates the parsed number into its own wire format (Docker's bytes and
NanoCpus, OpenSandbox's quantities, Daytona's whole GiB) and refuses only
what its backend cannot take (Docker's 6 MiB minimum, for example).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

import attrs

from mango.domain.errors import InvalidInput

__all__ = [
    "CPUS_GRAMMAR",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_PROCESS_LOG_BYTES",
    "DEFAULT_MAX_READ_BYTES",
    "MAX_CPUS",
    "MAX_MEMORY_BYTES",
    "MAX_OUTPUT_BYTES_LIMIT",
    "MAX_PROCESS_LOG_BYTES_LIMIT",
    "MAX_READ_BYTES_LIMIT",
    "MEMORY_GRAMMAR",
    "MIN_CPUS",
    "MemorySize",
    "parse_cpus",
]

DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
"""Default per-stream cap on the output an exec keeps (``MANGO_MAX_OUTPUT_BYTES``), 1 MiB."""
MAX_OUTPUT_BYTES_LIMIT = 256 * 1024 * 1024
"""Upper bound of ``MANGO_MAX_OUTPUT_BYTES``: each stream is held in memory up to the cap."""
DEFAULT_MAX_READ_BYTES = 16 * 1024 * 1024
"""Default bound of a buffered ``read_file`` (``MANGO_MAX_READ_BYTES``), 16 MiB."""
MAX_READ_BYTES_LIMIT = 1024 * 1024 * 1024
"""Upper bound of ``MANGO_MAX_READ_BYTES``: a buffered read holds the whole file in memory."""
DEFAULT_MAX_PROCESS_LOG_BYTES = 16 * 1024 * 1024
"""Default cap on the log a background process keeps (``MANGO_MAX_PROCESS_LOG_BYTES``), 16 MiB."""
MAX_PROCESS_LOG_BYTES_LIMIT = 64 * 1024 * 1024 * 1024
"""Upper bound of ``MANGO_MAX_PROCESS_LOG_BYTES`` (the log is on disk, never in memory)."""

MAX_MEMORY_BYTES = 1 << 50
"""The largest memory size (``1p``, 1 PiB): beyond any host."""
MIN_CPUS = 0.001
"""The smallest CPU count (one millicore, ``1m``): the finest any backend expresses."""
MAX_CPUS = 1024.0
"""The largest CPU count."""

MEMORY_GRAMMAR = (
    "a whole number of bytes, or a number with a unit k, m, g, t or p that may be followed "
    "by i and/or b, in any case (512m, 2g, 1.5GiB, 2Gi, 512Mi); every unit is a power of "
    "1024; from 1 byte to 1p"
)
"""The memory grammar, as error messages and settings descriptions state it."""
CPUS_GRAMMAR = "a number of CPUs (2, 1.5) or of millicores (500m), from 0.001 to 1024"
"""The CPU grammar, as error messages state it."""

_MEMORY = re.compile(
    r"(?P<number>[0-9]{1,30}(?:\.[0-9]{1,30})?)\s*(?P<unit>(?:[kmgtp]i?)?b?)\Z", re.IGNORECASE
)
_POWERS = {"": 0, "b": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi")
_CPUS = re.compile(r"(?P<number>[0-9]{1,30}(?:\.[0-9]{1,30})?)(?P<milli>m?)\Z")


def _power(value: int) -> int:
    if not 0 <= value < len(_SUFFIXES):
        raise InvalidInput(f"a memory unit is a power of 1024 from 0 to 5, got {value!r}")
    return value


@attrs.frozen
class MemorySize:
    """A memory size: a non-negative number of a binary unit (``1024 ** power`` bytes).

    Build one with :meth:`parse`. ``str()`` is the canonical spelling, the
    number as written with a Kubernetes binary suffix (``512m`` is ``512Mi``,
    a bare byte count stays bare).
    """

    number: Decimal
    power: int = attrs.field(default=0, validator=lambda _i, _a, value: _power(value))

    @property
    def bytes(self) -> int:
        """The size in bytes (a fraction of a byte is dropped)."""
        return int(self.number * (1024**self.power))

    def __str__(self) -> str:
        return f"{self.number}{_SUFFIXES[self.power]}"

    @classmethod
    def parse(cls, value: str | int, *, allow_zero: bool = False) -> MemorySize:
        """Parse ``value`` by :data:`MEMORY_GRAMMAR`; an ``int`` is a number of bytes.

        The result is 1 byte to 1p (zero too with ``allow_zero``, for settings
        where ``0`` means no limit). Anything else is :class:`InvalidInput`
        naming the value and the grammar.
        """
        if isinstance(value, int) and not isinstance(value, bool):
            size = cls(Decimal(value)) if value >= 0 else None
        elif isinstance(value, str):
            match = _MEMORY.match(value.strip())
            size = (
                None
                if match is None
                else cls(Decimal(match["number"]), _POWERS[match["unit"][:1].lower()])
            )
        else:
            size = None
        if size is None:
            raise InvalidInput(f"memory {value!r} is not a size ({MEMORY_GRAMMAR})")
        if size.bytes > MAX_MEMORY_BYTES:
            raise InvalidInput(f"memory {value!r} is more than 1p ({MEMORY_GRAMMAR})")
        if size.bytes == 0 and not (allow_zero and size.number == 0):
            raise InvalidInput(f"memory {value!r} is less than one byte ({MEMORY_GRAMMAR})")
        return size


def parse_cpus(value: float | str) -> float:
    """Parse a CPU count by :data:`CPUS_GRAMMAR`: a number, or a string of one or of millicores.

    Raises :class:`InvalidInput` naming the value and the grammar for
    anything else (``bool``, NaN, infinities, out of range, other text).
    """
    cpus: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        cpus = float(value)
    elif isinstance(value, str):
        match = _CPUS.match(value.strip())
        if match is not None:
            cpus = float(Decimal(match["number"]) / (1000 if match["milli"] else 1))
    if cpus is None or not math.isfinite(cpus) or not MIN_CPUS <= cpus <= MAX_CPUS:
        raise InvalidInput(f"cpus {value!r} is not a CPU count ({CPUS_GRAMMAR})")
    return cpus
