"""Benchmark: exec overhead of a warm SessionManager on the local provider.

Prints, in one run:

* the median cost of ``exec(["true"])`` through a warm SessionManager against a
  bare ``asyncio.create_subprocess_exec("true")`` (target ratio <= 1.05);
* the peak RSS growth while a command writes 1 GiB to stdout under a 1 MiB
  cap (target < 32 MiB).

The store is the in-memory one: a warm manager serves from its client cache
and does not touch the database on this path, so PostgreSQL would add start-up
time and nothing to the figure. Run: ``uv run python benchmarks/bench_local_exec.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from figures import ratio_at_most, report, value_below

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain import Command, SandboxSpec
from mango.local import LocalProvider

MIB = 1024 * 1024


async def _bare_true() -> None:
    proc = await asyncio.create_subprocess_exec(
        "true",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await proc.communicate()


async def _interleaved(
    fns: dict[str, Callable[[], Awaitable[None]]], rounds: int
) -> dict[str, float]:
    """Median seconds per call of each function, sampled alternately.

    Alternating the candidates in one loop exposes them to the same machine
    load, so their ratio is steadier than two back-to-back runs.
    """
    for _ in range(max(rounds // 10, 5)):
        for fn in fns.values():
            await fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            await fn()
            samples[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, median in medians.items():
        print(f"{name:<40} median {median * 1e3:8.3f} ms over {rounds} runs")
    return medians


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(rounds: int, gib: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        provider = LocalProvider(Path(tmp), max_output_bytes=MIB)
        store = InMemoryBindingStore()
        manager = SessionManager(provider, store)
        await manager.ensure_session("bench")
        spec = SandboxSpec()
        true = Command(("true",))

        async def via_manager() -> None:
            sandbox = await manager.acquire("bench", spec)
            await sandbox.exec(true)

        medians = await _interleaved(
            {
                "bare asyncio.create_subprocess_exec": _bare_true,
                "warm SessionManager exec(['true'])": via_manager,
            },
            rounds,
        )
        bare, mango = medians.values()
        ratio = mango / bare
        print(
            f"ratio mango/bare: {ratio:.3f} (target <= 1.05) {'OK' if ratio <= 1.05 else 'MISSED'}"
        )
        report(
            "local exec true: warm SessionManager / bare asyncio.create_subprocess_exec",
            mango=mango * 1e3,
            baseline=bare * 1e3,
            unit="ms",
            goal=ratio_at_most(1.05),
        )

        sandbox = await manager.acquire("bench", spec)
        before = _max_rss_mib()
        start = time.perf_counter()
        big = Command(("head", "-c", str(gib * 1024 * MIB), "/dev/zero"))
        result = await sandbox.exec(big)
        elapsed = time.perf_counter() - start
        growth = _max_rss_mib() - before
        print(
            f"{gib} GiB to stdout under a 1 MiB cap: kept {len(result.stdout)} bytes, "
            f"truncated={result.stdout_truncated}, {elapsed:.2f} s, "
            f"peak RSS growth {growth:.1f} MiB (target < 32) {'OK' if growth < 32 else 'MISSED'}"
        )
        report(
            f"local {gib} GiB stdout drained (1 MiB kept): peak RSS growth",
            mango=growth,
            unit="MiB",
            goal=value_below(32),
        )
        await manager.delete_session("bench")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--gib", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.gib))
