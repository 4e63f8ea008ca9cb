"""A Docker provider and a SessionManager with its SessionFiles, for the resource tests.

The daemon and the ``mango-test-busybox:latest`` image (``.ci/make-test-image``)
must be there: without them the tests skip, or fail with ``MANGO_REQUIRE_DOCKER=1``.
Every container carries this run's label and is removed at the end of its test.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from mango.app.files import StoredFiles
from mango.app.session_files import SessionFiles
from mango.domain import FileStore, MangoError
from mango.postgres import (
    PostgresBindingStore,
    PostgresFileCatalog,
    PostgresOutputCatalog,
    PostgresResourceCatalog,
)

DOCKER_IMAGE = "mango-test-busybox:latest"
RUN_LABELS = {"io.mango.test-run": f"resources-{uuid.uuid4().hex[:12]}"}


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


def make_session_files(
    store: PostgresBindingStore, blobs: FileStore, namespace: str
) -> SessionFiles:
    """SessionFiles on the test's database and ``blobs``."""
    stored = StoredFiles(PostgresFileCatalog(store.pool), blobs, namespace)
    return SessionFiles(
        PostgresResourceCatalog(store.pool), PostgresOutputCatalog(store.pool), stored
    )
