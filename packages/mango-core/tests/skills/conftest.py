"""Fixtures of the skill tests: a Files store, both catalogs, and a manager on Docker.

``catalog`` runs each catalog test on the PostgreSQL catalog (a fresh
database) and on the in-memory one. ``docker_manager`` is a SessionManager
on the Docker provider with SessionFiles and SessionSkills on the test's
database; it skips without a daemon and the ``mango-test-busybox:latest``
image (fails with ``MANGO_REQUIRE_DOCKER=1``), and deletes every Session it
made afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.app import SessionManager
from mango.app.files import StoredFiles
from mango.app.memory_store import InMemoryBindingStore
from mango.app.session_files import SessionFiles
from mango.app.skill_catalog import InMemorySkillCatalog
from mango.app.skills import SessionSkills
from mango.domain import MangoError
from mango.domain.files import FileStore
from mango.domain.skills import SkillCatalog
from mango.filestore import FileStoreKind, FileStoreSettings, open_file_store
from mango.postgres import (
    PostgresBindingStore,
    PostgresFileCatalog,
    PostgresOutputCatalog,
    PostgresResourceCatalog,
    PostgresSkillCatalog,
)

DOCKER_IMAGE = "mango-test-busybox:latest"
RUN_LABELS = {"io.mango.test-run": f"skills-{uuid.uuid4().hex[:12]}"}


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[FileStore]:
    """A filesystem Files store of this test's own."""
    store = open_file_store(FileStoreSettings(kind=FileStoreKind.FS, directory=tmp_path / "blobs"))
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture(params=["postgres", "memory"])
def catalog(request: pytest.FixtureRequest) -> SkillCatalog:
    """Each skill catalog: PostgreSQL (fresh database) and in-memory."""
    if request.param == "postgres":
        store: PostgresBindingStore = request.getfixturevalue("store")
        return PostgresSkillCatalog(store.pool)
    return InMemorySkillCatalog(InMemoryBindingStore())


@pytest.fixture
def skills(catalog: SkillCatalog, blobs: FileStore) -> SessionSkills:
    """SessionSkills on each catalog and the test's Files store."""
    return SessionSkills(catalog, blobs, "test-skills")


async def docker_provider(namespace: str, resource_dir: Path) -> object:
    """A Docker provider on the test image, or a skip (a failure with MANGO_REQUIRE_DOCKER=1)."""
    from mango_provider_docker import DockerProvider, Engine

    host = os.environ.get("DOCKER_HOST", "").strip() or None
    engine = Engine(host)
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
        host=host,
        pull_missing_images=False,
        extra_labels=RUN_LABELS,
    )


def managed(store: PostgresBindingStore, blobs: FileStore, namespace: str) -> dict[str, object]:
    """The ``files=`` and ``skills=`` of a SessionManager on the test's database."""
    stored = StoredFiles(PostgresFileCatalog(store.pool), blobs, namespace)
    files = SessionFiles(
        PostgresResourceCatalog(store.pool), PostgresOutputCatalog(store.pool), stored
    )
    return {
        "files": files,
        "skills": SessionSkills(PostgresSkillCatalog(store.pool), blobs, namespace),
    }


@pytest.fixture
async def docker_manager(
    store: PostgresBindingStore, blobs: FileStore, tmp_path: Path
) -> AsyncIterator[SessionManager]:
    """A SessionManager on Docker with files and skills; its Sessions are deleted after."""
    namespace = await store.deployment_namespace()
    provider = await docker_provider(namespace, tmp_path / "docker")
    manager = SessionManager(provider, store, **managed(store, blobs, namespace))  # type: ignore[arg-type]
    try:
        yield manager
    finally:
        for record in await store.list_sessions(1000):
            try:
                await manager.delete_session(record.session_id)
            except MangoError:
                continue
        await manager.aclose()
