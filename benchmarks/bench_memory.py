"""Benchmark: a Memory Store writeback of 2000 changed files, time and statements per file.

A real PostgreSQL (an embedded server started for the run) and a mount's
host side (``mango.provider.hostmemory.HostMemoryStores`` on a temporary
directory, what the Docker provider binds into its containers). Three
writebacks of 2000 files of 1 KiB each, each the work of one wave's end:

* ``create``: 2000 new files in an empty store;
* ``modify``: every one of them changed;
* ``delete``: every one of them removed.

Each is timed in three parts: reading the mount (walk, read, hash,
validate), the database transaction (``PostgresMemoryRepository.sync``: lock
the store and its heads, plan, insert the versions, change the heads) and
the refresh (rewrite the mount and its baseline from the new heads). The
statements are counted on the client: every ``execute`` is one, and every
row of an ``executemany`` is one (psycopg pipelines them: a few round trips
for the batch). Also: a wave step with nothing changed (read the mount,
compare the heads' digests, write nothing). Figures are reported, not asserted.

With ``--docker`` (a running dockerd and ``mango-test-busybox:latest``): the
overhead of a tool step's wave (its refresh and its writeback) when nothing
changed, ``exec true`` inside
``SessionManager.tool_step`` with 2 stores of 10 files attached against the
same ``exec true`` of a Session with none (the median of ``--rounds``).

Run: ``uv run python benchmarks/bench_memory.py [--files N] [--size BYTES]
[--docker] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool


class CountingCursor(AsyncCursor[Any]):
    """Counts the statements it sends: one per execute, one per executemany row."""

    statements = 0

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        CountingCursor.statements += 1
        return await super().execute(*args, **kwargs)

    async def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        rows = list(params_seq)
        CountingCursor.statements += len(rows)
        await super().executemany(query, rows, **kwargs)


def _files(count: int, size: int, tag: str, ids: Sequence[str] = ()) -> list[Any]:
    from mango.domain.memories import MemoryFile

    body = (tag * size)[:size]
    return [
        MemoryFile(f"/notes/{n // 100:02d}/note-{n:04d}.md", body, ids[n] if ids else "")
        for n in range(count)
    ]


async def _run(url: str, mount_root: Path, count: int, size: int) -> list[tuple[str, ...]]:
    from mango.domain.memories import Actor, MemoryFile, MemoryStoreMount, new_store_id
    from mango.postgres import PostgresMemoryRepository, open_store
    from mango.provider.hostmemory import HostMemoryStores

    rows: list[tuple[str, ...]] = []
    async with await open_store(url):  # migrated
        pass
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, kwargs={"cursor_factory": CountingCursor}, open=False
    )
    await pool.open()
    try:
        repository = PostgresMemoryRepository(pool)
        store = await repository.create_store(new_store_id(), "bench", "")
        mount = MemoryStoreMount(store.store_id, "bench")
        (mount_root / "memory").mkdir(parents=True)
        (mount_root / "state").mkdir()
        host = HostMemoryStores(mount_root / "memory", mount_root / "state")
        host.ensure(mount)
        await host.replace(mount, [])

        async def wave(label: str, local: list[MemoryFile]) -> None:
            # What the sandbox left: written on the host side, outside the wave.
            directory = host.directory(mount)
            for item in local:
                target = directory / item.path[1:]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(item.content, encoding="utf-8")
            started = time.perf_counter()
            snapshot = await host.read(mount)
            read = time.perf_counter()
            CountingCursor.statements = 0
            heads = await repository.sync(
                store.store_id, snapshot.baseline, snapshot.files, Actor.session("bench")
            )
            statements = CountingCursor.statements
            committed = time.perf_counter()
            await host.replace(mount, [MemoryFile(h.path, h.content, h.memory_id) for h in heads])
            done = time.perf_counter()
            rows.append(
                (
                    label,
                    f"{(read - started) * 1000:.0f}",
                    f"{(committed - read) * 1000:.0f}",
                    f"{(done - committed) * 1000:.0f}",
                    f"{(done - started) * 1000:.0f}",
                    str(statements),
                    f"{statements / count:.2f}",
                )
            )

        await wave("create", _files(count, size, "a"))
        await wave("modify", _files(count, size, "b"))
        for path in host.directory(mount).iterdir():
            if path.is_dir():
                for leaf in sorted(path.rglob("*"), reverse=True):
                    leaf.unlink() if leaf.is_file() else leaf.rmdir()
                path.rmdir()
        await wave("delete", [])
        await wave("create again", _files(count, size, "c"))
        started = time.perf_counter()
        snapshot = await host.read(mount)
        CountingCursor.statements = 0
        same = list(await repository.digests(store.store_id)) == list(snapshot.baseline)
        elapsed = time.perf_counter() - started
        assert same, "the heads moved"
        assert not snapshot.changed, "the mount changed"
        rows.append(
            ("nothing changed", "", "", "", f"{elapsed * 1000:.0f}",
             str(CountingCursor.statements), "")
        )  # fmt: skip
    finally:
        await pool.close()
    return rows


async def _docker(url: str, resource_dir: Path, rounds: int) -> tuple[float, float]:
    import statistics

    from mango.app import SessionManager
    from mango.domain import Command, SandboxSpec
    from mango.postgres import PostgresMemoryRepository, open_store
    from mango_provider_docker import DockerProvider

    spec = SandboxSpec(timeout=60.0)
    true = Command(("true",))
    async with await open_store(url) as store:
        provider = DockerProvider(
            resource_dir,
            namespace=await store.deployment_namespace(),
            image="mango-test-busybox:latest",
            pull_missing_images=False,
        )
        manager = SessionManager(provider, store, memory=PostgresMemoryRepository(store.pool))
        try:
            stores = []
            for name in ("first", "second"):
                created = await manager.memory_stores.create(name)
                for n in range(10):
                    await manager.memory_stores.write(created.store_id, f"/m{n}.md", "x" * 512)
                stores.append((created.store_id, "read_write"))
            await manager.create_session("with", memory=stores)
            await manager.create_session("without")
            times: dict[str, list[float]] = {"with": [], "without": []}
            for sid in ("with", "without"):
                sandbox = await manager.acquire(sid, spec)
                async with manager.tool_step(sid, spec):  # the first wave refreshes
                    await sandbox.exec(true)
                for _ in range(rounds):
                    started = time.perf_counter()
                    sandbox = await manager.acquire(sid, spec)
                    async with manager.tool_step(sid, spec):
                        await sandbox.exec(true)
                    times[sid].append(time.perf_counter() - started)
            return statistics.median(times["with"]), statistics.median(times["without"])
        finally:
            for sid in ("with", "without"):
                await manager.delete_session(sid)
            await manager.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024, help="bytes per file")
    parser.add_argument("--docker", action="store_true", help="also the pre-tool overhead")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    from mango.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="mango-bench-memory-") as scratch:
        root = Path(scratch)
        root.chmod(0o711)  # as root, the embedded PostgreSQL runs as an unprivileged account
        with EmbeddedPostgres(root / "pgdata") as url:
            rows = asyncio.run(_run(url, root / "mount", args.files, args.size))
            overhead = (
                asyncio.run(_docker(url, root / "docker", args.rounds)) if args.docker else None
            )
    headers = ("writeback", "read ms", "commit ms", "refresh ms", "total ms", "statements",
               "per file")  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(f"Memory Store writeback of {args.files} files of {args.size} bytes")
    for line in (headers, *rows):
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    if overhead is not None:
        with_stores, without = overhead
        print(
            f"tool step (exec true), median of {args.rounds}: with 2 stores "
            f"{with_stores * 1000:.1f} ms, without {without * 1000:.1f} ms, "
            f"overhead of both wave steps {(with_stores - without) * 1000:.1f} ms (goal <= 5 ms)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
