"""File Resources end to end: rules on PostgreSQL, admission, materialization on Docker.

Each store (filesystem, S3 on moto) holds the files; the Docker daemon runs
the sandboxes. What a test reads back it reads through the sandbox (exec,
file tools) or the rows, never through the code under test's own view.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import psycopg
import pytest

from mango.app import SessionManager
from mango.app.session_files import SessionFiles
from mango.domain import (
    CapabilityNotSupported,
    Command,
    InvalidInput,
    PermanentError,
    SandboxSpec,
    SessionDeleting,
    StoredFileNotFound,
    StoredFileNotReady,
)
from mango.domain.files import NewFile, file_blob_key, new_file_id
from mango.domain.resources import MAX_SESSION_RESOURCES, UPLOADS_ROOT
from mango.postgres import PostgresBindingStore

pytestmark = pytest.mark.postgres

SPEC = SandboxSpec(timeout=60.0)


@pytest.fixture
def files(session_files: SessionFiles) -> SessionFiles:
    """The Session resources and outputs of the test (conftest's, on each store)."""
    return session_files


async def chunks_of(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 4096):
        yield data[start : start + 4096]


async def stored(files: SessionFiles, data: bytes, name: str = "data.txt") -> str:
    return (await files.files.put(chunks_of(data), filename=name)).file_id


def sh(script: str, *args: str) -> Command:
    return Command(("sh", "-c", script, "sh", *args))


async def resource_rows(url: str, session_id: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(
            "SELECT mount_path, state FROM mango_session_resources WHERE session_id = %s"
            " ORDER BY mount_path",
            (session_id,),
        )
        return await cursor.fetchall()


# ------------------------------------------------------------------ the rules, on PostgreSQL


async def test_every_rule_is_checked_before_anything_changes(
    files: SessionFiles, store: PostgresBindingStore, database_url: str
) -> None:
    """Paths, overlaps, files and Sessions: each refusal typed, and no row written by it."""
    sid = "rules"
    await store.ensure_session(sid)
    first = await stored(files, b"one")
    added = await files.add_resource(sid, first)
    assert added.mount_path == f"{UPLOADS_ROOT}/{first}"
    await files.add_resource(sid, first, "dir/a.csv")
    refusals: list[tuple[str | None, type[Exception], str]] = [
        ("../escape", InvalidInput, r"'\.\.'"),
        ("dir/a.csv", InvalidInput, "overlaps"),
        ("dir", InvalidInput, "overlaps"),
        ("dir/a.csv/deeper", InvalidInput, "overlaps"),
        (f"{UPLOADS_ROOT}/{first}", InvalidInput, "overlaps"),
        ("bad\nname", InvalidInput, "control character"),
    ]
    for path, error, match in refusals:
        with pytest.raises(error, match=match):
            await files.add_resource(sid, first, path)
    with pytest.raises(StoredFileNotFound):
        await files.add_resource(sid, new_file_id())
    pending = NewFile(new_file_id(), "p.bin", "application/octet-stream", "x")
    pending = NewFile(
        pending.file_id, "p.bin", "application/octet-stream", file_blob_key("ns", pending.file_id)
    )
    await files.files.catalog.begin_upload(pending)
    with pytest.raises(StoredFileNotReady):
        await files.add_resource(sid, pending.file_id, "p.bin")
    with pytest.raises(InvalidInput, match="no session"):
        await files.add_resource("no-such-session", first, "x")
    assert await resource_rows(database_url, sid) == [
        (f"{UPLOADS_ROOT}/dir/a.csv", "active"),
        (f"{UPLOADS_ROOT}/{first}", "active"),
    ]
    await store.fence_session(sid)
    with pytest.raises(SessionDeleting):
        await files.add_resource(sid, first, "late.txt")


async def test_a_session_has_at_most_500_resources(
    files: SessionFiles, store: PostgresBindingStore
) -> None:
    """The 501st is refused; a removal makes room again."""
    sid = "many"
    await store.ensure_session(sid)
    file_id = await stored(files, b"x")
    added = [await files.add_resource(sid, file_id, f"f{i}") for i in range(MAX_SESSION_RESOURCES)]
    with pytest.raises(InvalidInput, match="500 file resources"):
        await files.add_resource(sid, file_id, "one-too-many")
    await files.begin_remove(sid, added[0].resource_id)
    await files.add_resource(sid, file_id, "one-too-many")
    with pytest.raises(InvalidInput, match="has no resource"):
        await files.begin_remove("other", added[1].resource_id)


async def test_a_stored_file_cannot_go_while_a_resource_refers_to_it(
    files: SessionFiles, store: PostgresBindingStore
) -> None:
    """Deleting the file of a resource is a ResourceConflict until the resource is gone."""
    from mango.domain import ResourceConflict

    await store.ensure_session("holds")
    file_id = await stored(files, b"held")
    resource = await files.add_resource("holds", file_id)
    with pytest.raises(ResourceConflict, match="resource of session"):
        await files.files.delete(file_id)
    await files.begin_remove("holds", resource.resource_id)
    await files.resources.finish_remove(resource.resource_id)
    await files.files.delete(file_id)


# ------------------------------------------------------------------ admission


async def test_a_provider_without_the_capabilities_refuses_at_admission(
    local_manager: SessionManager, files: SessionFiles, database_url: str
) -> None:
    """The local provider lists every reason; no Session row, resource row or output appears."""
    file_id = await stored(files, b"x")
    with pytest.raises(CapabilityNotSupported, match="file resource mounts") as refused:
        await local_manager.add_file_resource("local-1", file_id)
    assert refused.value.reasons == ("local does not support file resource mounts",)
    with pytest.raises(CapabilityNotSupported, match="session output mounts"):
        await local_manager.publish_outputs("local-1")
    assert await local_manager.store.get_session("local-1") is None
    assert await resource_rows(database_url, "local-1") == []


# ------------------------------------------------------------------ on Docker


async def test_a_resource_reaches_the_sandbox_read_only_and_only_once(
    docker_manager: SessionManager, files: SessionFiles
) -> None:
    """Added, materialized before the step, read at its path, never written, skipped next time."""
    data = b"hello resource\n" * 1000
    file_id = await stored(files, data)
    resource = await docker_manager.add_file_resource("mat-1", file_id, "inputs/data.txt")
    sandbox = await docker_manager.acquire("mat-1", SPEC)
    report = await docker_manager.materialize("mat-1", SPEC)
    assert (report.imported, report.present, report.removed) == (1, 0, 0)
    path = resource.mount_path
    seen = await sandbox.exec(sh('sha256sum "$1"; echo x > "$1" || echo refused', path))
    assert seen.stdout.decode().split()[0] == hashlib.sha256(data).hexdigest()
    assert seen.stdout.endswith(b"refused\n")
    assert await sandbox.read_file(path) == data
    again = await docker_manager.materialize("mat-1", SPEC)
    assert (again.imported, again.present) == (0, 1)


async def test_replacing_and_removing_a_resource(
    docker_manager: SessionManager, files: SessionFiles, database_url: str
) -> None:
    """A new resource at a removed one's path replaces it; a removal empties the mount."""
    old, new = await stored(files, b"old\n"), await stored(files, b"new\n")
    first = await docker_manager.add_file_resource("mat-2", old, "f.txt")
    sandbox = await docker_manager.acquire("mat-2", SPEC)
    await docker_manager.materialize("mat-2", SPEC)
    await files.begin_remove("mat-2", first.resource_id)  # a removal not applied yet...
    second = await docker_manager.add_file_resource("mat-2", new, "f.txt")
    report = await docker_manager.materialize("mat-2", SPEC)  # ...is applied first
    assert (report.removed, report.imported) == (1, 1)
    assert (await sandbox.exec(sh("cat /mnt/session/uploads/f.txt"))).stdout == b"new\n"
    removed = await docker_manager.remove_resource("mat-2", second.resource_id, SPEC)
    assert removed.removed == 1
    listing = await sandbox.exec(sh("ls -A /mnt/session/uploads"))
    assert listing.stdout == b""
    assert await resource_rows(database_url, "mat-2") == []


async def test_removal_without_a_sandbox_never_provisions_one(
    docker_manager: SessionManager, files: SessionFiles, database_url: str
) -> None:
    """A Session with no sandbox: the row goes, no container is created."""
    file_id = await stored(files, b"x")
    resource = await docker_manager.add_file_resource("mat-3", file_id)
    await docker_manager.remove_resource("mat-3", resource.resource_id, SPEC)
    assert await resource_rows(database_url, "mat-3") == []
    assert await docker_manager.provider.find("mat-3") is None
    assert await docker_manager.store.get_binding("mat-3") is None


async def test_a_container_older_than_the_mounts_fails_closed_at_materialization(
    docker_manager: SessionManager, files: SessionFiles
) -> None:
    """A Session bound to a container without the uploads mount: a permanent, explicit error."""
    from mango.domain import SandboxRef
    from mango_provider_docker.container import container_config

    provider = docker_manager.provider
    await docker_manager.ensure_session("old-1")
    name = provider.ownership.name("old-1")  # type: ignore[attr-defined]
    config = container_config(
        image="mango-test-busybox:latest",
        spec=SPEC,
        limits=provider._defaults,  # type: ignore[attr-defined]
        labels={**provider.extra_labels, **provider.ownership.labels("old-1")},  # type: ignore[attr-defined]
        host_dir=provider.resource_dir / name,  # type: ignore[attr-defined]
    )
    del config["HostConfig"]["Mounts"]
    engine = provider.engine  # type: ignore[attr-defined]
    made = await engine.create_container(name, config)
    await engine.start_container(made)
    from mango.domain import Binding

    await docker_manager.store.put_binding(
        Binding(session_id="old-1", ref=SandboxRef("docker", made), spec_hash="legacy")
    )
    file_id = await stored(files, b"x")
    await docker_manager.add_file_resource("old-1", file_id)
    with pytest.raises(PermanentError, match="recreate the Session's sandbox"):
        await docker_manager.materialize("old-1", SandboxSpec())
    with pytest.raises(PermanentError, match="before its resource mounts existed"):
        await docker_manager.publish_outputs("old-1")
