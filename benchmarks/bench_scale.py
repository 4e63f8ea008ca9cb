"""Benchmark: how mango's costs grow with the number of Sessions (issue 21, "Scale").

Two parts, on a real PostgreSQL (an embedded server started for the run) and
the local provider (``--docker`` adds the Docker provider to the first part):

* **Concurrent Sessions.** For each N of ``--sessions`` (default 1, 10, 100,
  500), N Sessions are provisioned through one SessionManager (as a worker
  holds them). Then ``exec true`` runs in up to 50 of them one at a time (the
  latency of one operation while N are cached), and in all N at once, each
  for ``--rounds`` rounds: throughput (execs per second), p50 and p99 of one
  exec, the most PostgreSQL connections the database saw (the store's pool
  is bounded at 10: never one per Session), the Python heap held per cached
  Session (tracemalloc while they are provisioned, allocations made by the
  in-process fakes left out) and the process's RSS growth per cached Session
  (whole pages: too coarse at N=10 for a goal). The goals: the one-at-a-time
  latency and the heap per Session at the largest N within 1.5x of N=10; at
  most 10 connections (the pool) plus the sampling one.
  The remote providers (``--remote``, default all four) run against their
  vendor fakes, served in this process, up to ``--remote-max`` (100) Sessions.
* **A large store.** ``--store`` Sessions (default 10 000) are bound in the
  database; then ``mango sessions list --json``, ``mango reconcile --json``
  (the scan of intents and fenced rows) and a cold ``acquire`` of one bound
  Session (a fresh SessionManager: binding read, attach) are timed, and
  compared with the same on a store of 10 Sessions. The goal: each within
  1.5x (nothing on these paths is O(all Sessions)).

Run: ``uv run python benchmarks/bench_scale.py [--sessions 1,10,100,500]
[--store 10000] [--rounds 5] [--docker]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from figures import ratio_at_most, report, value_at_most

from mango.config import Settings
from mango.domain import Command, SandboxSpec
from mango.runtime import Runtime, open_runtime

MANGO = str(Path(sys.executable).with_name("mango"))
FLAT = ratio_at_most(1.5)
DOCKER_IMAGE = "mango-test-busybox:latest"


def _rss_mib() -> float:
    """The current resident set size of this process, in MiB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / (1024 * 1024)


_NOT_MANGOS = [
    # The remote providers' fakes run in this process: their sandboxes are not the worker's.
    tracemalloc.Filter(inclusive=False, filename_pattern="*/fake/*", all_frames=True),
    tracemalloc.Filter(inclusive=False, filename_pattern="*/mango/fakes/*", all_frames=True),
]


def _heap_bytes() -> int:
    """Python heap held now by everything but the in-process fakes (tracemalloc is on)."""
    snapshot = tracemalloc.take_snapshot().filter_traces(_NOT_MANGOS)
    return sum(trace.size for trace in snapshot.traces)


def _database(server_url: str, name: str) -> str:
    """A fresh database ``name`` on the server (one deployment per part); its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlsplit(server_url)._replace(path=f"/{name}").geturl()


def _environ(
    url: str, root: Path, provider: str, settings: dict[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MANGO_")}
    env.update(
        MANGO_DATABASE_URL=url,
        MANGO_STATE_DIR=str(root / "state"),
        MANGO_SANDBOX=provider,
        MANGO_LOCAL_SANDBOX_DIR=str(root / "local"),
        MANGO_SANDBOX_RESOURCE_DIR=str(root / "docker"),
        MANGO_SANDBOX_IMAGE=DOCKER_IMAGE,
        MANGO_SANDBOX_PULL="0",
    )
    env.update(settings or {})
    return env


REMOTE = ("e2b", "cube", "opensandbox", "daytona")


@contextlib.asynccontextmanager
async def _remote_fake(name: str, scratch: Path) -> AsyncIterator[dict[str, str]]:
    """Serve ``name``'s vendor fake (in this process) for the block; yield its settings.

    ``scratch`` (an existing directory) holds the fake's sandboxes.
    """
    if name in ("e2b", "cube"):
        from mango_provider_e2b.fake import CUBE_MODE, E2BFakeService, FakeConfig, mango_settings

        config = (
            FakeConfig(mode=CUBE_MODE, api_key="cube_fake_key", domain="cube.local")
            if name == "cube"
            else FakeConfig()
        )
        async with E2BFakeService.create(scratch, config) as fake:
            yield mango_settings(fake.url, config)
    elif name == "opensandbox":
        from mango_provider_opensandbox.fake import FakeOpenSandbox

        # The real execd holds a finished command's stream open for 1 s: 0 here, so the
        # figure is the protocol's cost and the scaling, as in bench_opensandbox's grace-0 rows.
        async with FakeOpenSandbox(scratch, grace_seconds=0.0) as fake:
            yield {"OPEN_SANDBOX_DOMAIN": fake.url, "OPEN_SANDBOX_API_KEY": str(fake.api_key)}
    else:
        from mango_provider_daytona.fake import FAKE_API_KEY, open_fake_daytona

        async with open_fake_daytona(scratch) as served:
            yield {"DAYTONA_API_URL": served[0].url, "DAYTONA_API_KEY": FAKE_API_KEY}


@contextlib.asynccontextmanager
async def _runtime(env: dict[str, str]) -> AsyncIterator[Runtime]:
    async with open_runtime(Settings.from_env(env)) as runtime:
        yield runtime


async def _connections(url: str) -> int:
    """Client connections to this database now (the benchmark's own probe left out)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def _concurrent(
    url: str, root: Path, provider: str, n: int, *, rounds: int, settings: dict[str, str]
) -> dict[str, float]:
    """N Sessions held by one SessionManager, ``exec true`` in all at once, ``rounds`` times."""
    url = _database(url, f"scale_{provider}_{n}")
    env = _environ(url, root / f"{provider}-{n}", provider, settings)
    ids = [f"scale-{n}-{index}" for index in range(n)]
    command = Command(["true"])
    async with _runtime(env) as runtime:
        manager = runtime.manager
        before = _rss_mib()
        tracemalloc.start(32)
        heap_before = _heap_bytes()
        gate = asyncio.Semaphore(50)  # provisioning: bounded, as a worker's activity slots are

        async def provision(session_id: str) -> None:
            async with gate:
                await manager.ensure_session(session_id)
                sandbox = await manager.acquire(session_id, SandboxSpec())
                await sandbox.exec(command)

        await asyncio.gather(*(provision(session_id) for session_id in ids))
        heap = _heap_bytes() - heap_before
        tracemalloc.stop()
        grown = _rss_mib() - before
        latencies: list[float] = []
        most_connections = 0

        async def one(session_id: str) -> None:
            start = time.perf_counter()
            sandbox = await manager.acquire(session_id, SandboxSpec())
            result = await sandbox.exec(command)
            latencies.append(time.perf_counter() - start)
            if result.exit_code != 0:
                raise RuntimeError(f"exec true in {session_id} exited {result.exit_code}")

        # One at a time: does holding N Sessions slow each operation?
        sample = ids[:: max(1, n // 50)]
        for _ in range(rounds):
            for session_id in sample:
                await one(session_id)
        single = sorted(latencies)
        latencies.clear()
        # All at once: throughput, and the connections the pool opens for it.
        started = time.perf_counter()
        for _ in range(rounds):
            round_ = asyncio.gather(*(one(session_id) for session_id in ids))
            sampling = asyncio.ensure_future(_connections(url))
            await round_
            most_connections = max(most_connections, await sampling)
        elapsed = time.perf_counter() - started
        for session_id in ids:
            await manager.release(session_id)
    latencies.sort()
    return {
        "single": statistics.median(single) * 1000,
        "throughput": n * rounds / elapsed,
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "rss_per_session": grown / n,
        "heap_per_session": heap / n / 1024,
        "connections": float(most_connections),
    }


async def _bind(env: dict[str, str], count: int) -> str:
    """``count`` bound Sessions on the local provider; return one of them."""
    async with _runtime(env) as runtime:
        manager = runtime.manager
        gate = asyncio.Semaphore(50)

        async def bind(index: int) -> None:
            async with gate:
                session_id = f"stored-{index}"
                await manager.ensure_session(session_id)
                await manager.acquire(session_id, SandboxSpec())

        await asyncio.gather(*(bind(index) for index in range(count)))
    return "stored-0"


def _timed(argv: Sequence[str], env: dict[str, str], runs: int) -> float:
    """Median wall seconds of ``argv`` over ``runs`` runs (each must succeed)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.decode().strip()[-500:]}")
    return statistics.median(samples)


async def _cold_acquire(env: dict[str, str], session_id: str, runs: int) -> float:
    """Median seconds of ``acquire`` of a bound Session by a fresh SessionManager."""
    samples = []
    for _ in range(runs):
        async with _runtime(env) as runtime:
            start = time.perf_counter()
            await runtime.manager.acquire(session_id, SandboxSpec())
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def _store(url: str, root: Path, sizes: tuple[int, int], runs: int) -> None:
    small, large = sizes
    measured: dict[int, dict[str, float]] = {}
    for count in (small, large):
        stored = _database(url, f"store_{count}")
        env = _environ(stored, root / f"store-{count}", "local")
        started = time.perf_counter()
        one = await _bind(env, count)
        print(f"  bound {count} Sessions in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        measured[count] = {
            "list": _timed([MANGO, "sessions", "list", "--json"], env, runs) * 1000,
            "reconcile": _timed([MANGO, "reconcile", "--json"], env, runs) * 1000,
            "acquire": await _cold_acquire(env, one, runs) * 1000,
        }
    for key, what in (
        ("list", "`mango sessions list --json`"),
        ("reconcile", "`mango reconcile --json` (scan)"),
        ("acquire", "cold acquire of a bound Session"),
    ):
        report(
            f"{what} with {large} Sessions stored / with {small}",
            mango=measured[large][key],
            baseline=measured[small][key],
            unit="ms",
            goal=FLAT,
        )
        print(
            f"{what}: {measured[large][key]:.1f} ms at {large}, {measured[small][key]:.1f} ms"
            f" at {small}",
        )


def _print_row(provider: str, n: int, row: dict[str, float]) -> None:
    print(
        f"{provider} {n:4d} Sessions: one at a time {row['single']:6.2f} ms;"
        f" all at once {row['throughput']:7.1f} exec/s,"
        f" p50 {row['p50']:7.2f} ms, p99 {row['p99']:7.2f} ms,"
        f" RSS/Session {row['rss_per_session'] * 1024:6.1f} KiB,"
        f" heap/Session {row['heap_per_session']:6.1f} KiB,"
        f" PostgreSQL connections {row['connections']:.0f}"
    )


def _report_scaling(provider: str, figures: dict[int, dict[str, float]]) -> None:
    top = max(figures)
    base = figures[10]
    report(
        f"{provider} exec true, one at a time, with {top} Sessions cached / with 10",
        mango=figures[top]["single"],
        baseline=base["single"],
        unit="ms",
        goal=FLAT,
    )
    report(
        f"{provider} exec true p50, all {top} Sessions at once / all 10 at once",
        mango=figures[top]["p50"],
        baseline=base["p50"],
        unit="ms",
    )
    report(
        f"{provider} Python heap held per cached Session with {top} Sessions / with 10 "
        "(tracemalloc, the in-process fakes left out)",
        mango=figures[top]["heap_per_session"],
        baseline=base["heap_per_session"],
        unit="KiB",
        goal=FLAT,
    )
    report(
        f"{provider} RSS growth per cached Session with {top} Sessions / with 10 "
        "(whole pages: at 10 Sessions a few pages either way)",
        mango=figures[top]["rss_per_session"] * 1024,
        baseline=base["rss_per_session"] * 1024,
        unit="KiB",
    )
    report(
        f"{provider} PostgreSQL connections with {top} concurrent Sessions (pool: 10)",
        mango=figures[top]["connections"],
        unit="connections",
        goal=value_at_most(11),
    )
    report(
        f"{provider} throughput with {top} concurrent Sessions / with 10",
        mango=figures[top]["throughput"],
        baseline=base["throughput"],
        unit="exec/s",
    )


async def _main(args: argparse.Namespace, root: Path) -> None:
    from mango.embedded import EmbeddedPostgres

    sessions = sorted({int(n) for n in args.sessions.split(",")})
    providers = ["local", *(["docker"] if args.docker else [])]
    providers += [name for name in args.remote.split(",") if name]
    unknown = set(providers) - {"local", "docker", *REMOTE}
    if unknown:
        raise SystemExit(f"unknown provider(s) {sorted(unknown)}: choose from {REMOTE}")
    with EmbeddedPostgres(root / "pgdata") as url:
        for provider in providers:
            limit = {"local": max(sessions), "docker": args.docker_max}.get(
                provider, args.remote_max
            )
            async with contextlib.AsyncExitStack() as stack:
                settings: dict[str, str] = {}
                if provider in REMOTE:
                    scratch = root / f"fake-{provider}"
                    scratch.mkdir()
                    settings = await stack.enter_async_context(_remote_fake(provider, scratch))
                figures = {}
                for n in sessions:
                    if n > limit:
                        continue
                    figures[n] = await _concurrent(
                        url, root, provider, n, rounds=args.rounds, settings=settings
                    )
                    _print_row(provider, n, figures[n])
            if 10 in figures and len(figures) >= 2:
                _report_scaling(provider, figures)
        if args.store:
            await _store(url, root, (10, args.store), args.runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,10,100,500")
    parser.add_argument("--store", type=int, default=10_000, help="0 skips the large store")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5, help="runs of each store figure")
    parser.add_argument("--docker", action="store_true", help="the Docker provider too")
    parser.add_argument("--docker-max", type=int, default=100)
    parser.add_argument(
        "--remote",
        default=",".join(REMOTE),
        help="remote providers whose fakes are measured (comma-separated; empty: none)",
    )
    parser.add_argument("--remote-max", type=int, default=100)
    root = Path(tempfile.mkdtemp(prefix="mango-bench-scale-"))
    root.chmod(0o711)  # as root, the embedded PostgreSQL runs as an unprivileged account
    asyncio.run(_main(parser.parse_args(), root))


if __name__ == "__main__":
    main()
