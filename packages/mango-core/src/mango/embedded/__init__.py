"""Embedded servers that let mango run with no set-up: a private PostgreSQL.

``embedded_postgres()`` is what the composition roots use when no
``MANGO_DATABASE_URL`` is set; see :mod:`mango.embedded.postgres`. The names
are loaded on first use, so the reaper (:mod:`mango.embedded.reaper`) starts
without importing the database driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mango.embedded.postgres import (
        DATABASE,
        HOST,
        EmbeddedPostgres,
        EmbeddedStatus,
        default_data_dir,
        embedded_postgres,
        state_dir,
    )

__all__ = [
    "DATABASE",
    "HOST",
    "EmbeddedPostgres",
    "EmbeddedStatus",
    "default_data_dir",
    "embedded_postgres",
    "state_dir",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("mango.embedded.postgres"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
