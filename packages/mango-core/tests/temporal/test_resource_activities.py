"""The resource activities alone (ActivityEnvironment) on real PostgreSQL and the Files store.

On the local provider (no resource capability) the acquire says so and the
activities do nothing; on Docker they materialize (pinned skills and File
Resources), publish (a hostile output non-retryable, naming the path) and
reconcile.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from mango.app import SessionManager
from mango.app.files import StoredFiles
from mango.app.session_files import SessionFiles
from mango.app.skills import SessionSkills
from mango.domain import Command
from mango.filestore import FilesystemFileStore
from mango.local import LocalProvider
from mango.postgres import (
    PostgresBindingStore,
    PostgresFileCatalog,
    PostgresOutputCatalog,
    PostgresResourceCatalog,
    PostgresSkillCatalog,
)
from mango.temporal import MangoActivities
from mango.temporal.messages import AcquireInput
from mango.temporal.resource_messages import (
    MaterializeInput,
    PublishOutputsInput,
    ReconcileFilesInput,
)

pytestmark = pytest.mark.postgres


async def _files(store: PostgresBindingStore, tmp_path: Path) -> SessionFiles:
    stored = StoredFiles(
        PostgresFileCatalog(store.pool),
        FilesystemFileStore(tmp_path / "blobs"),
        await store.deployment_namespace(),
    )
    return SessionFiles(
        PostgresResourceCatalog(store.pool), PostgresOutputCatalog(store.pool), stored
    )


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_on_a_provider_without_the_capabilities_nothing_runs(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """The acquire says neither step applies; publishing reports that it did not run."""
    files = await _files(store, tmp_path)
    manager = SessionManager(LocalProvider(tmp_path / "local"), store, files=files)
    worker = MangoActivities(manager, store, heartbeat_interval=0.05)
    env = ActivityEnvironment()
    await store.ensure_session("plain")
    acquired = await env.run(worker.acquire_sandbox, AcquireInput(session_id="plain"))
    assert (acquired.materializes, acquired.publishes) == (False, False)
    published = await env.run(worker.publish_outputs, PublishOutputsInput(session_id="plain"))
    assert published.ran is False
    cleaned = await env.run(worker.reconcile_files, ReconcileFilesInput(stale_after=0))
    assert cleaned.failures == ()
    await manager.aclose()


async def test_on_docker_the_activities_materialize_publish_and_refuse_by_name(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """Materialize before a step (a pinned skill too), publish when quiet; a FIFO is a
    non-retryable refusal."""
    from ..files.docker_sandboxes import docker_provider  # noqa: TID252 - no tests package
    from ..skills.helpers import SKILL_MD, skill_tree  # noqa: TID252 - no tests package

    files = await _files(store, tmp_path)
    namespace = await store.deployment_namespace()
    skills = SessionSkills(PostgresSkillCatalog(store.pool), files.files.blobs, namespace)
    provider = await docker_provider(namespace, tmp_path / "docker")
    manager = SessionManager(provider, store, files=files, skills=skills)  # type: ignore[arg-type]
    worker = MangoActivities(manager, store, heartbeat_interval=0.05)
    env = ActivityEnvironment()
    sid = "activities"
    try:
        version = await skills.add(skill_tree(tmp_path / "skill"))
        await manager.create_session(sid, skills=[str(version.ref)])
        data = b"materialized by an activity\n"
        stored = await files.files.put(_chunks(data), filename="in.txt")
        await manager.add_file_resource(sid, stored.file_id, "in.txt")
        acquired = await env.run(worker.acquire_sandbox, AcquireInput(session_id=sid))
        assert (acquired.materializes, acquired.publishes) == (True, True)
        done = await env.run(worker.materialize_resources, MaterializeInput(session_id=sid))
        assert (done.imported, done.present) == (1, 0)
        sandbox = await manager.acquire(sid, MaterializeInput(session_id=sid).spec)
        skill = await sandbox.exec(Command(("cat", "/workspace/skills/hello-skill/SKILL.md")))
        assert skill.stdout == SKILL_MD, skill
        seen = await sandbox.exec(
            Command(
                (
                    "sh",
                    "-c",
                    "sha256sum /mnt/session/uploads/in.txt; echo o > /mnt/session/outputs/o",
                )
            )
        )
        assert seen.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
        published = await env.run(worker.publish_outputs, PublishOutputsInput(session_id=sid))
        assert (published.ran, published.files, published.published) == (True, 1, 1)
        await sandbox.exec(Command(("mkfifo", "/mnt/session/outputs/pipe")))
        with pytest.raises(ApplicationError) as refused:
            await env.run(worker.publish_outputs, PublishOutputsInput(session_id=sid))
        assert refused.value.non_retryable
        assert refused.value.type == "OutputRejected"
        assert "'pipe'" in str(refused.value)
    finally:
        await manager.delete_session(sid)
        await manager.aclose()
