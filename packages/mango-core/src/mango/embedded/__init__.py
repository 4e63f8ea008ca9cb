"""Embedded servers that let mango run with no set-up: a private PostgreSQL.

``embedded_postgres()`` is what the composition roots use when no
``MANGO_DATABASE_URL`` is set; see :mod:`mango.embedded.postgres`.
"""

from mango.embedded.postgres import (
    DATABASE,
    HOST,
    EmbeddedPostgres,
    default_data_dir,
    embedded_postgres,
    state_dir,
)

__all__ = [
    "DATABASE",
    "HOST",
    "EmbeddedPostgres",
    "default_data_dir",
    "embedded_postgres",
    "state_dir",
]
