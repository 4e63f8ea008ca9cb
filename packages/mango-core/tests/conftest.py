"""Session fixtures for real infrastructure: the embedded PostgreSQL server.

``postgres_url`` starts one embedded server per test session (in a temporary
directory, never the user's state directory) or uses
``MANGO_TEST_DATABASE_URL``. ``database_url`` (and ``second_database_url``,
for a second deployment) gives each test a fresh database on it, and
``store`` an opened :class:`PostgresBindingStore`.
``embedded_data_dir`` is a not-yet-existing data directory for tests that
start their own embedded server.

At configuration, the workspace's own sources are byte-compiled (see
:func:`pytest_configure`).

It also holds the in-memory provider fake (:class:`MemoryProvider` over a
shared :class:`World`) that counts what SessionManager asks of a provider;
it stands for no real backend, so unit tests and store tests may use it.
"""

from __future__ import annotations

import compileall
import contextlib
import itertools
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import psycopg
import pytest
from psycopg import sql

from mango.config import DEFAULT_MAX_READ_BYTES
from mango.domain import (
    CapabilitySet,
    Command,
    ExecResult,
    OwnershipError,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    session_key_hash,
    validate_session_id,
)
from mango.embedded import EmbeddedPostgres
from mango.postgres import PostgresBindingStore, open_store
from mango.provider.reads import check_size, read_limit

WORKSPACE = Path(__file__).resolve().parents[3]


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the workspace's own sources once, before any test starts a Python child.

    ``uv sync`` compiles what it installs (``compile-bytecode``), but the
    workspace members are editable: their modules stay in ``packages/*/src``.
    Without their byte code (``PYTHONDONTWRITEBYTECODE`` set, or a fresh
    clone), every ``mango worker``, CLI and fake subprocess would compile them
    from source again, and so would every Temporal workflow sandbox, which
    re-imports the workflow module per run. Up-to-date files cost a stat each.
    """
    for src in (*sorted(WORKSPACE.glob("packages/*/src")), WORKSPACE / "docs/example-provider/src"):
        compileall.compile_dir(src, quiet=2)


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


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections for the whole test.

    Bound but never listening: a connection is refused, and no other process
    (another pytest-xdist worker, a server starting meanwhile) can take the
    port, as it could one that was merely free a moment ago.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url(embedded_root: Path) -> Iterator[str]:
    """URL of the session's PostgreSQL server (embedded unless MANGO_TEST_DATABASE_URL)."""
    configured = os.environ.get("MANGO_TEST_DATABASE_URL", "").strip()
    if configured:
        yield configured
        return
    with EmbeddedPostgres(embedded_root / "session" / "pgdata") as url:
        _without_disk_flushes(url)
        yield url


TEST_SERVER_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
"""The session's own server does not flush to disk: the tests kill processes, never the machine,
and a flush per commit (thousands of databases, migrations and rows) kept the CI machine's disk
and kernel busy. Commands' own embedded servers (started by the code under test) keep the
defaults."""


def _without_disk_flushes(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        for name, value in TEST_SERVER_SETTINGS.items():
            admin.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
        admin.execute("SELECT pg_reload_conf()")


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


# ------------------------------------------------ in-memory provider fake


@attrs.define
class World:
    """What exists 'at the provider', shared by every provider instance."""

    resources: dict[str, str] = attrs.field(factory=dict)  # external id -> owner key
    files: dict[str, dict[str, bytes]] = attrs.field(factory=dict)
    creates: int = 0
    destroys: int = 0
    keep_alives: int = 0
    paused: set[str] = attrs.field(factory=set)  # external ids paused at the provider
    pauses: int = 0
    resumes: int = 0
    commands: list[Command] = attrs.field(factory=list)
    counter: itertools.count[int] = attrs.field(factory=itertools.count)


@attrs.define
class MemorySandbox:
    """A sandbox that lives in a :class:`World`."""

    world: World
    ref: SandboxRef
    fail_destroy: bool = False
    root: str = "/workspace"

    async def exec(self, command: Command) -> ExecResult:
        if self.ref.external_id not in self.world.resources:
            raise SandboxNotFound(f"{self.ref} is gone")
        self.world.commands.append(command)
        return ExecResult(stdout=" ".join(command.argv).encode())

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        if self.ref.external_id not in self.world.resources:
            raise SandboxNotFound(f"{self.ref} is gone")
        data = self.world.files[self.ref.external_id][path]
        check_size(path, len(data), read_limit(max_bytes, DEFAULT_MAX_READ_BYTES))
        return data

    @contextlib.asynccontextmanager
    async def open_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        data = await self.read_file(path, max_bytes=1 << 62)

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 4):
                yield data[start : start + 4]

        yield chunks()

    async def write_file(self, path: str, data: bytes) -> None:
        if self.ref.external_id not in self.world.resources:
            raise SandboxNotFound(f"{self.ref} is gone")
        self.world.files[self.ref.external_id][path] = data

    def exec_stream(self, command: Command) -> Any:
        raise NotImplementedError("streaming is not part of these tests")

    async def destroy(self) -> None:
        if self.fail_destroy:
            raise RuntimeError("destroy failed (injected)")
        if self.world.resources.pop(self.ref.external_id, None) is not None:
            self.world.destroys += 1
        self.world.files.pop(self.ref.external_id, None)
        self.world.paused.discard(self.ref.external_id)


@attrs.define
class KeepAliveMemorySandbox(MemorySandbox):
    """A memory sandbox that, like a remote one, must be kept alive on every acquire.

    It also pauses and resumes (capability ``pause``), in the world's records only.
    """

    async def keep_alive(self) -> None:
        if self.ref.external_id not in self.world.resources:
            raise SandboxNotFound(f"{self.ref} is gone")
        self.world.keep_alives += 1

    def _present(self) -> None:
        if self.ref.external_id not in self.world.resources:
            raise SandboxNotFound(f"{self.ref} is gone")

    async def pause(self) -> None:
        """Pause (idempotent): the world remembers it, as a backend does."""
        self._present()
        if self.ref.external_id not in self.world.paused:
            self.world.paused.add(self.ref.external_id)
            self.world.pauses += 1

    async def resume(self) -> None:
        """Resume (idempotent)."""
        self._present()
        if self.ref.external_id in self.world.paused:
            self.world.paused.discard(self.ref.external_id)
            self.world.resumes += 1

    async def is_paused(self) -> bool:
        self._present()
        return self.ref.external_id in self.world.paused


@attrs.define
class MemoryProvider:
    """A provider over a :class:`World`; ``idempotent=False`` makes create duplicate."""

    world: World
    idempotent: bool = True
    fail_destroy: bool = False
    name: str = "memory"
    capabilities: CapabilitySet = attrs.field(factory=CapabilitySet)
    keep_alive: bool = False
    attaches: int = 0
    finds: int = 0
    create_calls: int = 0

    def _id(self, key: str) -> str:
        if self.idempotent:
            return "res-" + session_key_hash(key)
        return f"res-{session_key_hash(key)}-{next(self.world.counter)}"

    async def create(self, session_key: str, spec: SandboxSpec) -> MemorySandbox:
        self.create_calls += 1
        validate_session_id(session_key)
        external_id = self._id(session_key)
        if external_id not in self.world.resources:
            self.world.resources[external_id] = session_key
            self.world.files[external_id] = {}
            self.world.creates += 1
        return self._sandbox(SandboxRef(self.name, external_id))

    def _sandbox(self, ref: SandboxRef) -> MemorySandbox:
        kind = KeepAliveMemorySandbox if self.keep_alive else MemorySandbox
        return kind(self.world, ref, self.fail_destroy)

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> MemorySandbox:
        self.attaches += 1
        if ref.provider != self.name:
            raise OwnershipError(f"{ref} is not a {self.name} reference")
        owner = self.world.resources.get(ref.external_id)
        if owner is None:
            raise SandboxNotFound(f"{ref} does not exist")
        if owner != session_key:
            raise OwnershipError(f"{ref} belongs to another session")
        return self._sandbox(ref)

    async def find(self, session_key: str) -> SandboxRef | None:
        self.finds += 1
        for external_id, owner in self.world.resources.items():
            if owner == session_key:
                return SandboxRef(self.name, external_id)
        return None

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        if ref.provider != self.name:
            raise OwnershipError(f"{ref} is not a {self.name} reference")
        owner = self.world.resources.get(ref.external_id)
        if owner is None:
            return
        if owner != session_key:
            raise OwnershipError(f"{ref} belongs to another session")
        if self.fail_destroy:
            raise RuntimeError("destroy failed (injected)")
        del self.world.resources[ref.external_id]
        self.world.files.pop(ref.external_id, None)
        self.world.paused.discard(ref.external_id)
        self.world.destroys += 1

    def _owned(self, session_key: str, ref: SandboxRef) -> str:
        if ref.provider != self.name:
            raise OwnershipError(f"{ref} is not a {self.name} reference")
        owner = self.world.resources.get(ref.external_id)
        if owner is None:
            raise SandboxNotFound(f"{ref} does not exist")
        if owner != session_key:
            raise OwnershipError(f"{ref} belongs to another session")
        return ref.external_id

    async def pause(self, session_key: str, ref: SandboxRef) -> None:
        """Pause by reference (idempotent), as the sandbox's own pause does."""
        await KeepAliveMemorySandbox(
            self.world, SandboxRef(self.name, self._owned(session_key, ref))
        ).pause()

    async def resume(self, session_key: str, ref: SandboxRef) -> None:
        """Resume by reference (idempotent)."""
        await KeepAliveMemorySandbox(
            self.world, SandboxRef(self.name, self._owned(session_key, ref))
        ).resume()

    async def aclose(self) -> None:
        return None


@pytest.fixture
def new_world() -> Callable[[], World]:
    """Make a fresh provider world (for Hypothesis machines, one per example)."""
    return World


@pytest.fixture
def world() -> World:
    """A fresh provider world."""
    return World()


@pytest.fixture
def make_provider(world: World) -> Callable[..., MemoryProvider]:
    """Build providers over the shared world (each one a 'fresh worker')."""

    def make(**kwargs: object) -> MemoryProvider:
        return MemoryProvider(world, **kwargs)  # type: ignore[arg-type]

    return make
