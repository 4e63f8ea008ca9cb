"""Fixtures of the Memory Store tests: one database and one Docker-backed manager per module.

The tests of a module share a fresh database and one SessionManager on the
Docker provider (each test uses its own Sessions and stores), so a module
costs one ``CREATE DATABASE`` and the containers its Sessions need. Every
Session the manager made is deleted when the module ends.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from mango.app import SessionManager
from mango.domain import MangoError
from mango.postgres import PostgresBindingStore, PostgresMemoryRepository, open_store

DOCKER_IMAGE = "mango-test-busybox:latest"
RUN_LABELS = {"io.mango.test-run": f"memory-{uuid.uuid4().hex[:12]}"}


def _with_database(url: str, name: str) -> str:
    if url.startswith(("postgresql://", "postgres://")):
        return urlsplit(url)._replace(path=f"/{name}").geturl()
    return psycopg.conninfo.make_conninfo(url, dbname=name)


@pytest.fixture(scope="module")
async def module_database_url(postgres_url: str) -> AsyncIterator[str]:
    """A fresh database for the whole module, dropped afterwards."""
    name = f"test_{uuid.uuid4().hex}"
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(postgres_url, name)
    finally:
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="module")
async def module_store(module_database_url: str) -> AsyncIterator[PostgresBindingStore]:
    """The module's opened, migrated store."""
    async with await open_store(module_database_url) as opened:
        yield opened


@pytest.fixture(scope="module")
def memory_resource_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Docker provider's resource directory for the module."""
    return tmp_path_factory.mktemp("memory-docker")


async def docker_provider(namespace: str, resource_dir: Path) -> object:
    """A Docker provider on the test image, or a skip (a failure with MANGO_REQUIRE_DOCKER=1)."""
    from mango_provider_docker import DockerProvider, Engine

    engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
    try:
        ready = await engine.image_exists(DOCKER_IMAGE)
    except MangoError:
        ready = False
    finally:
        await engine.aclose()
    if not ready:
        if os.environ.get("MANGO_REQUIRE_DOCKER", "") == "1":
            pytest.fail(f"no Docker Engine with {DOCKER_IMAGE} (MANGO_REQUIRE_DOCKER=1)")
        pytest.skip(f"no Docker Engine with {DOCKER_IMAGE}")
    return DockerProvider(
        resource_dir,
        namespace=namespace,
        image=DOCKER_IMAGE,
        host=os.environ.get("DOCKER_HOST", "").strip() or None,
        pull_missing_images=False,
        extra_labels=RUN_LABELS,
    )


@pytest.fixture(scope="module")
async def memory_manager(
    module_store: PostgresBindingStore, memory_resource_dir: Path
) -> AsyncIterator[SessionManager]:
    """A SessionManager on Docker with the module's Memory Stores; its Sessions go after."""
    namespace = await module_store.deployment_namespace()
    provider = await docker_provider(namespace, memory_resource_dir)
    manager = SessionManager(
        provider,  # type: ignore[arg-type]
        module_store,
        memory=PostgresMemoryRepository(module_store.pool),
    )
    try:
        yield manager
    finally:
        for record in await module_store.list_sessions(1000):
            try:
                await manager.delete_session(record.session_id)
            except MangoError:
                continue
        await manager.aclose()
