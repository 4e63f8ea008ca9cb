"""Session fixtures for real infrastructure: the embedded PostgreSQL server.

``postgres_url`` starts one embedded server per test session (in a temporary
directory, never the user's state directory) or uses
``MANGO_TEST_DATABASE_URL``. ``database_url`` (and ``second_database_url``,
for a second deployment) gives each test a fresh database on it, and
``store`` an opened :class:`PostgresBindingStore`.
``embedded_data_dir`` is a not-yet-existing data directory for tests that
start their own embedded server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from mango.embedded import EmbeddedPostgres
from mango.postgres import PostgresBindingStore, open_store


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (URL or keyword conninfo)."""
    if url.startswith(("postgresql://", "postgres://")):
        return urlsplit(url)._replace(path=f"/{name}").geturl()
    return psycopg.conninfo.make_conninfo(url, dbname=name)


@pytest.fixture(scope="session")
def embedded_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory for test clusters that the server's account can reach.

    Normally pytest's temporary directory. As root, PostgreSQL runs as an
    unprivileged account, which cannot pass pytest's private
    ``/tmp/pytest-of-root`` (0700, and every other pytest run as root resets
    it to 0700), so a searchable 0711 directory is made in the system
    temporary directory instead and removed at the end of the session.
    """
    if os.geteuid() != 0:
        yield tmp_path_factory.mktemp("embedded-postgres")
        return
    root = Path(tempfile.mkdtemp(prefix="mango-tests-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def embedded_data_dir(embedded_root: Path) -> Path:
    """A fresh, not yet existing path for a test's own cluster."""
    parent = Path(tempfile.mkdtemp(dir=embedded_root))
    parent.chmod(0o711)
    return parent / "pgdata"


@pytest.fixture(scope="session")
def postgres_url(embedded_root: Path) -> Iterator[str]:
    """URL of the session's PostgreSQL server (embedded unless MANGO_TEST_DATABASE_URL)."""
    configured = os.environ.get("MANGO_TEST_DATABASE_URL", "").strip()
    if configured:
        yield configured
        return
    with EmbeddedPostgres(embedded_root / "session" / "pgdata") as url:
        yield url


@pytest.fixture
async def database_url(postgres_url: str) -> AsyncIterator[str]:
    """URL of a fresh, empty database for one test, dropped afterwards."""
    async for url in _fresh_database(postgres_url):
        yield url


@pytest.fixture
async def second_database_url(postgres_url: str) -> AsyncIterator[str]:
    """Another fresh database on the same server (a second deployment), dropped afterwards."""
    async for url in _fresh_database(postgres_url):
        yield url


async def _fresh_database(postgres_url: str) -> AsyncIterator[str]:
    name = f"test_{uuid.uuid4().hex}"
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(postgres_url, name)
    finally:
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresBindingStore]:
    """An opened, migrated store on the test's fresh database."""
    async with await open_store(database_url) as opened:
        yield opened
