"""mango: one durable sandbox per AI-agent Session, on any backend.

The names below are the public API for applications (see :mod:`mango.api`);
provider authors import :mod:`mango.provider` instead. They are loaded on
first use, so ``import mango`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Command",
    "ExecResult",
    "MangoError",
    "SandboxSpec",
    "SessionManager",
    "SessionSkills",
    "Settings",
    "SkillVersion",
    "StoredFile",
    "StoredFiles",
    "__version__",
    "open_file_store",
    "open_session_manager",
    "open_skills",
    "resolve_spec",
]

_LAZY = {
    "Command": "mango.domain.values",
    "ExecResult": "mango.domain.values",
    "MangoError": "mango.domain.errors",
    "SandboxSpec": "mango.domain.values",
    "SessionManager": "mango.app",
    "SessionSkills": "mango.app.skills",
    "Settings": "mango.config",
    "SkillVersion": "mango.domain.skills",
    "StoredFile": "mango.domain.files",
    "StoredFiles": "mango.app.files",
    "open_file_store": "mango.api",
    "open_session_manager": "mango.api",
    "open_skills": "mango.api",
    "resolve_spec": "mango.api",
}

if TYPE_CHECKING:
    from mango.api import open_file_store, open_session_manager, open_skills, resolve_spec
    from mango.app import SessionManager
    from mango.app.files import StoredFiles
    from mango.app.skills import SessionSkills
    from mango.config import Settings
    from mango.domain.errors import MangoError
    from mango.domain.files import StoredFile
    from mango.domain.skills import SkillVersion
    from mango.domain.values import Command, ExecResult, SandboxSpec


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mango' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
