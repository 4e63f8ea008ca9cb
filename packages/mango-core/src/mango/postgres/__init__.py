"""The PostgreSQL adapter: the BindingStore and the SQL migrations it ships.

``open_store(url)`` connects (psycopg 3, async pool), applies pending
migrations under an advisory lock, and returns a :class:`PostgresBindingStore`;
    "PostgresOutputCatalog",
    "PostgresResourceCatalog",
    "PostgresSessionClaims",
    "PostgresSkillCatalog",
"""

from mango.postgres._errors import redact, redact_conninfo
from mango.postgres.claims import PostgresSessionClaims
from mango.postgres.connect import open_store
from mango.postgres.files import PostgresFileCatalog
from mango.postgres.outputs import PostgresOutputCatalog
from mango.postgres.resources import PostgresResourceCatalog
from mango.postgres.schema import (
    MIGRATION_LOCK_KEY,
    Migration,
    Pool,
    apply_migrations,
    load_migrations,
)
from mango.postgres.skills import PostgresSkillCatalog
from mango.postgres.store import PostgresBindingStore

__all__ = [
    "MIGRATION_LOCK_KEY",
    "Migration",
    "Pool",
    "PostgresBindingStore",
    "PostgresFileCatalog",
    "PostgresOutputCatalog",
    "PostgresResourceCatalog",
    "PostgresSessionClaims",
    "PostgresSkillCatalog",
    "apply_migrations",
    "load_migrations",
    "open_store",
    "redact",
    "redact_conninfo",
]
