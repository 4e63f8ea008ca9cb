"""Benchmark: the Daytona provider against the official SDK, on the same fake Daytona.

Prints, in one run (figures are reported, not asserted):

* ``exec true``: median through a warm SessionManager on the Daytona provider
  against ``sandbox.process.exec("true")`` of the official SDK (target
  mango/SDK <= 1.0);
* a command writing 1 GiB to stdout, mango's 1 MiB cap: the peak RSS growth
  of the client process (target < 32 MiB), and the SDK's for contrast (the
  fake daemon buffers up to 64 MiB of output, as a real daemon buffers all);
* create-to-first-exec: ``provider.create`` + ``exec true`` against the SDK's
  ``create`` + ``process.exec``;
* attach after a restart: a fresh provider's ``attach`` + ``exec true``
  against a fresh SDK client's ``get`` + ``process.exec``.

``--flood-mib`` sets the flood's size (1 GiB by default); the SDK has no
streaming exec, so its figure is the buffered one, for contrast.

The fake runs in its own process (``python -m mango_provider_daytona.fake``),
so the clients' memory is measured alone; each RSS figure comes from a fresh
client process. Needs no network and no account.
Run: ``uv run python benchmarks/bench_daytona.py [--runs N] [--create-runs N] [--flood-mib N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable

from figures import ratio_at_most, report, spawn_medians, value_below

from mango.app import InMemoryBindingStore, SessionManager
from mango.provider import Command, SandboxSpec
from mango_provider_daytona import DaytonaProvider
from mango_provider_daytona.fake import FAKE_API_KEY

TRUE = Command(("true",))
MIB = 1 << 20


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _median(call: Callable[[], Awaitable[object]], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _sdk(url: str) -> object:
    from daytona import AsyncDaytona, DaytonaConfig

    return AsyncDaytona(DaytonaConfig(api_key=FAKE_API_KEY, api_url=url))


async def exec_true(url: str, runs: int) -> dict[str, float]:
    """Interleaved medians of exec true: mango (warm manager) and the SDK."""
    provider = DaytonaProvider(url, FAKE_API_KEY, namespace="bench")
    manager = SessionManager(provider=provider, store=InMemoryBindingStore())
    session = f"bench-{uuid.uuid4().hex[:8]}"
    await manager.ensure_session(session)
    spec = SandboxSpec(timeout=60)
    async with _sdk(url) as sdk:  # type: ignore[attr-defined]
        theirs = await sdk.create(timeout=60)

        async def mango_once() -> None:
            sandbox = await manager.acquire(session, spec)
            result = await sandbox.exec(TRUE)
            assert result.exit_code == 0

        async def sdk_once() -> None:
            response = await theirs.process.exec("true")
            assert response.exit_code == 0

        for _ in range(5):  # warm both paths
            await mango_once()
            await sdk_once()
        mango_times, sdk_times = [], []
        for _ in range(runs):
            mango_times.append(await _median(mango_once, 1))
            sdk_times.append(await _median(sdk_once, 1))
        await sdk.delete(theirs)
    await manager.release(session)
    await provider.aclose()
    return {"mango": statistics.median(mango_times), "sdk": statistics.median(sdk_times)}


async def create_to_first_exec(url: str, runs: int) -> dict[str, float]:
    """Medians of create + first exec, and of attach after a restart + exec: mango and SDK."""
    provider = DaytonaProvider(url, FAKE_API_KEY, namespace="bench")
    mango_times, sdk_times, mango_attach, sdk_attach = [], [], [], []
    async with _sdk(url) as sdk:  # type: ignore[attr-defined]
        for index in range(runs):
            key = f"bench-create-{uuid.uuid4().hex[:8]}-{index}"
            started = time.perf_counter()
            sandbox = await provider.create(key, SandboxSpec())
            await sandbox.exec(TRUE)
            mango_times.append(time.perf_counter() - started)
            restarted = DaytonaProvider(url, FAKE_API_KEY, namespace="bench")
            started = time.perf_counter()
            again = await restarted.attach(key, sandbox.ref, SandboxSpec())
            await again.exec(TRUE)
            mango_attach.append(time.perf_counter() - started)
            await restarted.aclose()
            await sandbox.destroy()
            started = time.perf_counter()
            theirs = await sdk.create(timeout=60)
            await theirs.process.exec("true")
            sdk_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            async with _sdk(url) as fresh:  # type: ignore[attr-defined]
                found = await fresh.get(theirs.id)
                await found.process.exec("true")
                sdk_attach.append(time.perf_counter() - started)
            await sdk.delete(theirs)
    await provider.aclose()
    return {
        "mango": statistics.median(mango_times),
        "sdk": statistics.median(sdk_times),
        "mango_attach": statistics.median(mango_attach),
        "sdk_attach": statistics.median(sdk_attach),
    }


async def flood(url: str, client: str, mib: int) -> dict[str, float]:
    """Peak RSS growth of this process while a command prints ``mib`` MiB (in a fresh process)."""
    script = f"head -c {mib * MIB} /dev/zero"
    if client == "mango":
        provider = DaytonaProvider(url, FAKE_API_KEY, namespace="bench")
        sandbox = await provider.create(f"bench-flood-{uuid.uuid4().hex[:8]}", SandboxSpec())
        await sandbox.exec(TRUE)
        before = _rss_mib()
        started = time.perf_counter()
        result = await sandbox.exec(Command(("sh", "-c", script), timeout=600))
        elapsed = time.perf_counter() - started
        kept, truncated = len(result.stdout), result.stdout_truncated
        await sandbox.destroy()
        await provider.aclose()
    else:
        async with _sdk(url) as sdk:  # type: ignore[attr-defined]
            theirs = await sdk.create(timeout=60)
            await theirs.process.exec("true")
            before = _rss_mib()
            started = time.perf_counter()
            response = await theirs.process.exec(script, timeout=600)
            elapsed = time.perf_counter() - started
            kept, truncated = len(response.result.encode()), False
            await sdk.delete(theirs)
    return {
        "growth_mib": _rss_mib() - before,
        "seconds": elapsed,
        "kept": kept,
        "truncated": truncated,
    }


def _start_fake() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "mango_provider_daytona.fake"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def _in_sandbox_part(times: dict[str, float], runs: int) -> None:
    """What each client's command costs inside the sandbox, run here: mango's wrapper vs ``true``.

    The fake's sandboxes are local processes, so this is the share of the exec
    figures above that is process starts in the sandbox rather than protocol.
    """
    from mango_provider_daytona.scripts import exec_line

    with tempfile.TemporaryDirectory() as root:
        plan = exec_line(TRUE, root=root, cap=1 << 20)
        local = spawn_medians(
            {"mango": ["/bin/sh", "-c", plan.line], "sdk": ["/bin/sh", "-c", "true"]}, runs
        )
    print(
        f"in the sandbox (run here by /bin/sh -c): mango's wrapper {local['mango']:.2f} ms, "
        f"the SDK's `true` {local['sdk']:.2f} ms"
    )
    report(
        "Daytona exec true, the in-sandbox part alone: mango's capping wrapper / `true` "
        "(both run here by /bin/sh -c)",
        mango=local["mango"],
        baseline=local["sdk"],
        unit="ms",
    )
    report(
        "Daytona exec true without the in-sandbox part: (mango - its wrapper) / (SDK - `true`)",
        mango=times["mango"] * 1e3 - local["mango"],
        baseline=times["sdk"] * 1e3 - local["sdk"],
        unit="ms",
    )


def main() -> None:
    """Run every measurement against one fake and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--create-runs", type=int, default=10)
    parser.add_argument("--flood-mib", type=int, default=1024)
    parser.add_argument("--flood", choices=["mango", "sdk"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        print(json.dumps(asyncio.run(flood(args.url, args.flood, args.flood_mib))))
        return
    fake, url = _start_fake()
    try:
        print(f"fake Daytona at {url}; load average {os.getloadavg()[0]:.1f}")
        times = asyncio.run(exec_true(url, args.runs))
        ratio = times["mango"] / times["sdk"]
        print(
            f"exec true: mango {times['mango'] * 1e3:.2f} ms, SDK {times['sdk'] * 1e3:.2f} ms, "
            f"ratio {ratio:.2f} (target <= 1.0 {'✔' if ratio <= 1.0 else '✘'})"
        )
        report(
            "Daytona exec true / daytona SDK",
            mango=times["mango"] * 1e3,
            baseline=times["sdk"] * 1e3,
            unit="ms",
            goal=ratio_at_most(1.0),
        )
        _in_sandbox_part(times, args.runs)
        floods = {}
        for client in ("mango", "sdk"):
            argv = ["--flood", client, "--url", url, "--flood-mib", str(args.flood_mib)]
            output = subprocess.run(
                [sys.executable, __file__, *argv],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            figures = floods[client] = json.loads(output.strip().splitlines()[-1])
            print(
                f"{args.flood_mib} MiB stdout, {client}: "
                f"peak RSS growth {figures['growth_mib']:.1f} MiB, "
                f"{figures['seconds']:.1f} s, kept {figures['kept']} bytes, "
                f"truncated {figures['truncated']}"
            )
        report(
            f"Daytona {args.flood_mib} MiB stdout drained / daytona SDK (buffered: it cannot "
            "stream)",
            mango=floods["mango"]["seconds"],
            baseline=floods["sdk"]["seconds"],
            unit="s",
        )
        report(
            f"Daytona {args.flood_mib} MiB stdout drained: mango peak RSS growth (SDK: "
            f"{floods['sdk']['growth_mib']:.0f} MiB)",
            mango=floods["mango"]["growth_mib"],
            unit="MiB",
            goal=value_below(32),
        )
        created = asyncio.run(create_to_first_exec(url, args.create_runs))
        print(
            f"create to first exec: mango {created['mango'] * 1e3:.1f} ms, "
            f"SDK {created['sdk'] * 1e3:.1f} ms, ratio {created['mango'] / created['sdk']:.2f}"
        )
        print(
            f"attach after restart + exec: mango {created['mango_attach'] * 1e3:.1f} ms, "
            f"SDK {created['sdk_attach'] * 1e3:.1f} ms"
        )
        for label, mine, sdk, goal in (
            ("create to first exec", "mango", "sdk", ratio_at_most(1.0)),
            ("attach after restart + exec", "mango_attach", "sdk_attach", ratio_at_most(1.2)),
        ):
            report(
                f"Daytona {label} / daytona SDK",
                mango=created[mine] * 1e3,
                baseline=created[sdk] * 1e3,
                unit="ms",
                goal=goal,
            )
    finally:
        fake.terminate()
        fake.wait(30)


if __name__ == "__main__":
    main()
