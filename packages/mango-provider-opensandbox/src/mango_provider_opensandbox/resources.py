"""Resource limits of a new sandbox, in the Kubernetes-style quantities OpenSandbox takes.

Sizes arrive parsed by mango's one grammar (:class:`~mango.provider.MemorySize`,
:func:`~mango.provider.parse_cpus`); this module only spells them the way
the server reads them: memory with a binary suffix (``512m`` is ``512Mi``),
CPUs as a whole number or millicores.
"""

from __future__ import annotations

from mango.provider import MemorySize, SandboxSpec, parse_cpus

__all__ = ["DEFAULT_CPU", "DEFAULT_MEMORY", "cpu_limit", "memory_limit", "resource_limits"]

DEFAULT_CPU = "1"
DEFAULT_MEMORY = "2Gi"


def cpu_limit(cpus: float | str) -> str:
    """CPUs as OpenSandbox takes them: ``"2"`` for whole numbers, millicores otherwise.

    ``cpus`` is a number or a string of mango's CPU grammar (``1.5``, ``500m``);
    anything else is :class:`~mango.provider.InvalidInput`.
    """
    value = parse_cpus(cpus)
    if value.is_integer():
        return str(int(value))
    return f"{max(1, round(value * 1000))}m"


def memory_limit(size: str | int) -> str:
    """A memory size as OpenSandbox takes it: ``512m``/``1g`` become ``512Mi``/``1Gi``.

    ``size`` is text of mango's memory grammar (binary units throughout, as
    Docker reads ``m``; a bare number is bytes and stays bytes) or a number of
    bytes; anything else is :class:`~mango.provider.InvalidInput`.
    """
    return str(MemorySize.parse(size))


def resource_limits(spec: SandboxSpec, *, cpu: str | None, memory: str | None) -> dict[str, str]:
    """``resourceLimits`` for ``spec``: its cpus and memory, else the provider's defaults."""
    size = spec.memory_size
    return {
        "cpu": cpu_limit(spec.cpus) if spec.cpus is not None else (cpu or DEFAULT_CPU),
        "memory": str(size) if size is not None else (memory or DEFAULT_MEMORY),
    }
