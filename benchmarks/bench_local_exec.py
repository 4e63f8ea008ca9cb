"""Benchmark: exec overhead of a warm SessionManager on the local provider.

Prints, in one run:

* the median cost of ``exec(["true"])`` through a warm SessionManager against a
  bare ``asyncio.create_subprocess_exec("true")`` (target ratio <= 1.05);
* where the difference goes: the provider's sandbox ``exec`` alone (no
  SessionManager), and the process-level guarantees written by hand with
  asyncio (a new session for the tree kill, a cleared environment, the
  sandbox's directory, both pipes read under the cap), in the same rounds;
* the peak RSS growth while a command writes 1 GiB to stdout under a 1 MiB
  cap (target < 32 MiB).

The store is the in-memory one: a warm manager serves from its client cache
and does not touch the database on this path, so PostgreSQL would add start-up
time and nothing to the figure. Run: ``uv run python benchmarks/bench_local_exec.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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


async def _capped(stream: asyncio.StreamReader | None, cap: int) -> bytes:
    kept = bytearray()
    assert stream is not None
    while chunk := await stream.read(64 * 1024):
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept)


def _guarded_true(cwd: Path) -> Callable[[], Awaitable[None]]:
    """``true`` with the local provider's process-level guarantees, by hand, nothing else."""

    async def run() -> None:
        proc = await asyncio.create_subprocess_exec(
            "true",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env={"PATH": os.defpath, "HOME": str(cwd)},
            cwd=cwd,
        )
        await asyncio.gather(_capped(proc.stdout, MIB), _capped(proc.stderr, MIB), proc.wait())

    return run


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

        bound = await provider.create("bench-provider", spec)

        async def via_provider() -> None:
            await bound.exec(true)

        medians = await _interleaved(
            {
                "bare asyncio.create_subprocess_exec": _bare_true,
                "warm SessionManager exec(['true'])": via_manager,
                "provider sandbox exec(['true'])": via_provider,
                "the same guarantees by hand (asyncio)": _guarded_true(Path(tmp)),
            },
            rounds,
        )
        bare, mango, alone, guarded = medians.values()
        await bound.destroy()
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
        report(
            "local exec true: the guarantees by hand (new session, cleared env, capped pipes) "
            "/ bare asyncio",
            mango=guarded * 1e3,
            baseline=bare * 1e3,
            unit="ms",
        )
        report(
            "local exec true: provider sandbox exec alone / the guarantees by hand",
            mango=alone * 1e3,
            baseline=guarded * 1e3,
            unit="ms",
        )
        report(
            "local exec true: warm SessionManager / provider sandbox exec alone",
            mango=mango * 1e3,
            baseline=alone * 1e3,
            unit="ms",
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
