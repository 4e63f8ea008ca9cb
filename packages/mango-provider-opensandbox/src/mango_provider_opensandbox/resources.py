"""Resource limits of a new sandbox, in the Kubernetes-style strings OpenSandbox takes."""

from __future__ import annotations

import re

from mango.provider import InvalidInput, SandboxSpec

__all__ = ["DEFAULT_CPU", "DEFAULT_MEMORY", "cpu_limit", "memory_limit", "resource_limits"]

DEFAULT_CPU = "1"
DEFAULT_MEMORY = "2Gi"
_MEMORY = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[a-zA-Z]*)\Z")
_UNITS = {
    "": "",
    "b": "",
    "k": "Ki",
    "kb": "Ki",
    "ki": "Ki",
    "m": "Mi",
    "mb": "Mi",
    "mi": "Mi",
    "g": "Gi",
    "gb": "Gi",
    "gi": "Gi",
    "t": "Ti",
    "tb": "Ti",
    "ti": "Ti",
}


def cpu_limit(cpus: float) -> str:
    """CPUs as OpenSandbox takes them: ``"2"`` for whole numbers, millicores otherwise."""
    if cpus <= 0:
        raise InvalidInput(f"cpus must be positive, got {cpus!r}")
    if float(cpus).is_integer():
        return str(int(cpus))
    return f"{max(1, round(cpus * 1000))}m"


def memory_limit(text: str) -> str:
    """A memory size as OpenSandbox takes it: Docker-style ``512m``/``1g`` become ``512Mi``/``1Gi``.

    Binary units throughout (as Docker reads ``m``); a bare number is bytes.
    """
    match = _MEMORY.match(text.strip())
    unit = match.group("unit").lower() if match else None
    if match is None or unit not in _UNITS or float(match.group("number")) <= 0:
        raise InvalidInput(f"memory {text!r} is not a size such as 512m, 2g or 2Gi (binary units)")
    return match.group("number") + _UNITS[unit]


def resource_limits(spec: SandboxSpec, *, cpu: str | None, memory: str | None) -> dict[str, str]:
    """``resourceLimits`` for ``spec``: its cpus and memory, else the provider's defaults."""
    return {
        "cpu": cpu_limit(spec.cpus) if spec.cpus is not None else (cpu or DEFAULT_CPU),
        "memory": memory_limit(spec.memory) if spec.memory else (memory or DEFAULT_MEMORY),
    }
