"""``mango memory``: Memory Stores, their memories and their version history.

A Memory Store is durable, cross-Session text memory: a Session attached to
it (``mango sessions create ID --memory STORE_ID``) sees it at
``/mnt/memory/<slug>``, and every change its commands make becomes a
version when the step ends. Reads and writes here are outside any sandbox
(their versions are an ``api_actor``'s).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import with_runtime
from mango.cli.output import echo_json, echo_table

if TYPE_CHECKING:
    from mango.domain.memories import MemoryHead, MemoryStore, MemoryVersion
    from mango.runtime import Runtime

__all__ = ["memory"]


def _store_row(store: MemoryStore) -> dict[str, Any]:
    return {
        "id": store.store_id,
        "name": store.name,
        "mount_path": f"/mnt/memory/{store.slug}",
        "created_at": store.created_at.isoformat(),
        "archived_at": store.archived_at.isoformat() if store.archived_at else None,
    }


def _version_row(version: MemoryVersion) -> dict[str, Any]:
    return {
        "id": version.version_id,
        "memory_id": version.memory_id,
        "operation": version.operation.value,
        "path": version.path,
        "sha256": version.sha256,
        "size": version.size,
        "created_at": version.created_at.isoformat(),
        "actor_type": version.actor.type.value,
        "actor_id": version.actor.id,
    }


@click.group(name="memory")
def memory() -> None:
    """Memory Stores: durable memory shared by Sessions, every change a version.

    Needs a provider that declares memory-stores (docker) to attach a store
    to a Session; the stores themselves need only the database.
    """


@memory.command(name="create")
@click.argument("name")
@click.option("--description", default="", help="What the store is for.")
def memory_create(name: str, description: str) -> None:
    """Create a Memory Store named NAME; print its id.

    Sessions see it at /mnt/memory/<slug>, the slug made from NAME
    (lowercase letters and digits, '-' between).
    """

    async def run(rt: Runtime) -> MemoryStore:
        return await rt.manager.memory_stores.create(name, description=description)

    click.echo(with_runtime(run).store_id)


@memory.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def memory_ls(as_json: bool) -> None:
    """List the Memory Stores, newest first."""

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        return [_store_row(store) for store in await rt.manager.memory_stores.list()]

    rows = with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["id", "name", "mount path", "archived"],
        [(r["id"], r["name"], r["mount_path"], r["archived_at"] or "-") for r in rows],
    )


@memory.command(name="write")
@click.argument("store_id")
@click.argument("path")
@click.option(
    "--from",
    "source",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the content from this file (default: standard input).",
)
def memory_write(store_id: str, path: str, source: Path | None) -> None:
    """Write the memory at PATH (such as /notes.md) of STORE_ID; print its version id.

    At most 100 KiB of UTF-8 text; the same content again makes no version.
    """
    data = source.read_bytes() if source is not None else sys.stdin.buffer.read()

    async def run(rt: Runtime) -> MemoryHead:
        return await rt.manager.memory_stores.write(store_id, path, data)

    click.echo(with_runtime(run).version_id)


@memory.command(name="read")
@click.argument("store_id")
@click.argument("path")
def memory_read(store_id: str, path: str) -> None:
    """Print the memory at PATH of STORE_ID."""

    async def run(rt: Runtime) -> MemoryHead:
        return await rt.manager.memory_stores.read(store_id, path)

    sys.stdout.write(with_runtime(run).content)
    sys.stdout.flush()


@memory.command(name="versions")
@click.argument("store_id")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def memory_versions(store_id: str, path: str, as_json: bool) -> None:
    """List every version made at PATH of STORE_ID, oldest first (who made it, when)."""

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        found = await rt.manager.memory_stores.versions(store_id, path)
        return [_version_row(version) for version in found]

    rows = with_runtime(run)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["version", "operation", "actor", "size", "created"],
        [
            (r["id"], r["operation"], f"{r['actor_type']}:{r['actor_id']}",
             "-" if r["size"] is None else r["size"], r["created_at"])
            for r in rows
        ],
    )  # fmt: skip


@memory.command(name="archive")
@click.argument("store_id")
def memory_archive(store_id: str) -> None:
    """Archive STORE_ID: read-only from now on (Sessions may attach it read_only)."""

    async def run(rt: Runtime) -> MemoryStore:
        return await rt.manager.memory_stores.archive(store_id)

    store = with_runtime(run)
    click.echo(f"{store.store_id}: archived")
