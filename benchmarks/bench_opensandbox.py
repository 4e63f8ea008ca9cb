"""OpenSandbox provider vs the official SDK, on the same fake server (reported, not asserted).

The fake runs in a child process, so the RSS figures are the client's alone.

1. ``exec(["true"])`` latency, mango vs ``SandboxSync.commands.run("true")``, with the
   fake's execd grace period at 1 s (as the real server) and at 0 (protocol cost only);
2. peak RSS growth of the client while a command prints 1 GiB under mango's 1 MiB
   cap, and the SDK's for contrast on a smaller flood (it keeps every line);
3. create-to-first-exec, mango vs the SDK;
4. attach after a restart + one exec: a fresh provider's ``attach`` vs the SDK's
   ``SandboxSync.connect`` on a fresh connection config.

Run: ``uv run python benchmarks/bench_opensandbox.py [--flood-mib 1024] [--rounds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from figures import ratio_at_most, report, spawn_medians, value_below

from mango.provider import Command, SandboxSpec
from mango_provider_opensandbox import OpenSandboxProvider

_SERVE = """
import asyncio, sys
from mango_provider_opensandbox.fake import FakeOpenSandbox

async def main():
    fake = FakeOpenSandbox(sys.argv[1], grace_seconds=float(sys.argv[2]))
    async with fake:
        print(fake.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Fake:
    """The fake server in a child process; stops when its stdin closes."""

    def __init__(self, scratch: Path, grace: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(scratch), str(grace)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _sdk_config(url: str) -> object:
    from opensandbox.config.connection_sync import ConnectionConfigSync

    return ConnectionConfigSync(
        domain=url.removeprefix("http://"),
        api_key="fake-opensandbox-key",
        disable_metrics=True,
        request_timeout=timedelta(seconds=120),
    )


def _sdk(url: str) -> object:
    from opensandbox.sync.sandbox import SandboxSync

    config = _sdk_config(url)
    return SandboxSync.create(
        "python:3.12-slim",
        entrypoint=["tail", "-f", "/dev/null"],
        resource={"cpu": "1", "memory": "1Gi"},
        connection_config=config,
    )


async def _median(rounds: int, call: Callable[[], Awaitable[object]]) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


async def exec_latency(url: str, rounds: int) -> tuple[float, float]:
    provider = OpenSandboxProvider(url, api_key="fake-opensandbox-key")
    try:
        sandbox = await provider.create("bench-exec", SandboxSpec(timeout=60))
        await sandbox.exec(Command(("true",)))
        mango_ms = await _median(rounds, lambda: sandbox.exec(Command(("true",))))
        sdk = await asyncio.to_thread(_sdk, url)
        await asyncio.to_thread(sdk.commands.run, "true")  # type: ignore[attr-defined]
        sdk_ms = await _median(
            rounds,
            lambda: asyncio.to_thread(sdk.commands.run, "true"),  # type: ignore[attr-defined]
        )
        await asyncio.to_thread(sdk.kill)  # type: ignore[attr-defined]
        await sandbox.destroy()
    finally:
        await provider.aclose()
    return mango_ms, sdk_ms


async def flood(url: str, mib: int) -> tuple[float, float, bool, int]:
    provider = OpenSandboxProvider(url, api_key="fake-opensandbox-key")
    try:
        sandbox = await provider.create("bench-flood", SandboxSpec(timeout=3600))
        before = _rss_mib()
        start = time.perf_counter()
        result = await sandbox.exec(
            Command(("sh", "-c", f"head -c {mib * 1024 * 1024} /dev/zero"), timeout=3600)
        )
        seconds = time.perf_counter() - start
        growth = _rss_mib() - before
        await sandbox.destroy()
    finally:
        await provider.aclose()
    return growth, seconds, result.stdout_truncated, len(result.stdout)


def sdk_flood(url: str, mib: int) -> tuple[float, float]:
    sandbox = _sdk(url)
    before = _rss_mib()
    start = time.perf_counter()
    # Lines of 1 KiB: execd sends one event per line, the SDK keeps them all.
    sandbox.commands.run(  # type: ignore[attr-defined]
        f"head -c {mib * 1024 * 1024} /dev/zero | tr '\\\\0' 'a' | fold -w 1023"
    )
    seconds = time.perf_counter() - start
    growth = _rss_mib() - before
    sandbox.kill()  # type: ignore[attr-defined]
    return growth, seconds


async def create_to_first_exec(url: str, rounds: int) -> tuple[float, float]:
    provider = OpenSandboxProvider(url, api_key="fake-opensandbox-key")
    counter = iter(range(10**6))

    async def mango_once() -> None:
        sandbox = await provider.create(f"bench-create-{next(counter)}", SandboxSpec(timeout=60))
        await sandbox.exec(Command(("true",)))

    def sdk_once() -> None:
        sandbox = _sdk(url)
        sandbox.commands.run("true")  # type: ignore[attr-defined]

    try:
        mango_ms = await _median(rounds, mango_once)
        sdk_ms = await _median(rounds, lambda: asyncio.to_thread(sdk_once))
    finally:
        await provider.aclose()
    return mango_ms, sdk_ms


async def attach_and_exec(url: str, rounds: int) -> tuple[float, float]:
    """Medians (ms) of a restarted client's attach + exec true: mango and the SDK."""
    from opensandbox.sync.sandbox import SandboxSync

    provider = OpenSandboxProvider(url, api_key="fake-opensandbox-key")
    spec = SandboxSpec(timeout=60)
    sandbox = await provider.create("bench-attach", spec)
    await sandbox.exec(Command(("true",)))
    theirs = await asyncio.to_thread(_sdk, url)
    sandbox_id = theirs.id  # type: ignore[attr-defined]

    async def mango_once() -> None:
        fresh = OpenSandboxProvider(url, api_key="fake-opensandbox-key")
        try:
            again = await fresh.attach("bench-attach", sandbox.ref, spec)
            await again.exec(Command(("true",)))
        finally:
            await fresh.aclose()

    def sdk_once() -> None:
        connected = SandboxSync.connect(sandbox_id, connection_config=_sdk_config(url))
        connected.commands.run("true")  # type: ignore[attr-defined]

    try:
        mango_ms = await _median(rounds, mango_once)
        sdk_ms = await _median(rounds, lambda: asyncio.to_thread(sdk_once))
    finally:
        await asyncio.to_thread(theirs.kill)  # type: ignore[attr-defined]
        await sandbox.destroy()
        await provider.aclose()
    return mango_ms, sdk_ms


def _in_sandbox_part(mango_ms: float, sdk_ms: float, rounds: int) -> None:
    """What each client's command costs inside the sandbox, run here as execd runs it.

    The fake's sandboxes are local processes (``bash -c``, as execd), so this is
    the share of the exec figures that is process starts in the sandbox: mango's
    framing wrapper (``dd | base64 | tr`` per stream) against the SDK's ``true``.
    """
    from mango.provider.shell import plan_command
    from mango_provider_opensandbox.wire import wrap

    shell = "bash" if shutil.which("bash") else "sh"
    line = wrap(plan_command(("true",), stdin=b"", cwd="", env={}, staging_dir="/unused").line)
    local = spawn_medians(
        {"mango": [shell, "-c", line], "sdk": [shell, "-c", "true"]}, max(rounds, 20)
    )
    print(
        f"in the sandbox (run here by {shell} -c): mango's wrapper {local['mango']:.2f} ms, "
        f"the SDK's `true` {local['sdk']:.2f} ms"
    )
    report(
        "OpenSandbox exec true, the in-sandbox part alone: mango's framing wrapper / `true` "
        f"(both run here by {shell} -c)",
        mango=local["mango"],
        baseline=local["sdk"],
        unit="ms",
    )
    report(
        "OpenSandbox exec true (grace 0) without the in-sandbox part: "
        "(mango - its wrapper) / (SDK - `true`)",
        mango=mango_ms - local["mango"],
        baseline=sdk_ms - local["sdk"],
        unit="ms",
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--flood-mib", type=int, default=1024)
    parser.add_argument("--sdk-flood-mib", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mango-bench-osb-") as scratch:
        for grace in (1.0, 0.0):
            fake = Fake(Path(scratch) / f"g{grace}", grace)
            try:
                mango_ms, sdk_ms = await exec_latency(fake.url, args.rounds)
                print(
                    f"exec true, execd grace {grace:.0f}s: mango {mango_ms:.1f} ms, "
                    f"SDK {sdk_ms:.1f} ms, ratio {mango_ms / sdk_ms:.2f}"
                )
                report(
                    f"OpenSandbox exec true / opensandbox SDK (execd grace {grace:g} s"
                    + (", as the real server)" if grace else ": protocol cost only)"),
                    mango=mango_ms,
                    baseline=sdk_ms,
                    unit="ms",
                    goal=ratio_at_most(1.0),
                )
                if grace == 0.0:
                    _in_sandbox_part(mango_ms, sdk_ms, args.rounds)
                    mango_ms, sdk_ms = await create_to_first_exec(
                        fake.url, max(5, args.rounds // 4)
                    )
                    print(
                        f"create-to-first-exec: mango {mango_ms:.1f} ms, SDK {sdk_ms:.1f} ms, "
                        f"ratio {mango_ms / sdk_ms:.2f}"
                    )
                    report(
                        "OpenSandbox create to first exec / opensandbox SDK (grace 0)",
                        mango=mango_ms,
                        baseline=sdk_ms,
                        unit="ms",
                        goal=ratio_at_most(1.0),
                    )
                    mango_ms, sdk_ms = await attach_and_exec(fake.url, max(5, args.rounds // 4))
                    print(
                        f"attach after restart + exec: mango {mango_ms:.1f} ms, "
                        f"SDK {sdk_ms:.1f} ms, ratio {mango_ms / sdk_ms:.2f}"
                    )
                    report(
                        "OpenSandbox attach after restart + exec / opensandbox SDK (grace 0)",
                        mango=mango_ms,
                        baseline=sdk_ms,
                        unit="ms",
                        goal=ratio_at_most(1.2),
                    )
                    growth, seconds, truncated, kept = await flood(fake.url, args.flood_mib)
                    print(
                        f"{args.flood_mib} MiB stdout under a 1 MiB cap: mango RSS growth "
                        f"{growth:.1f} MiB in {seconds:.1f} s (kept {kept} bytes, "
                        f"truncated={truncated})"
                    )
                    sdk_growth, sdk_seconds = await asyncio.to_thread(
                        sdk_flood, fake.url, args.sdk_flood_mib
                    )
                    print(
                        f"{args.sdk_flood_mib} MiB stdout through the SDK: RSS growth "
                        f"{sdk_growth:.1f} MiB in {sdk_seconds:.1f} s"
                    )
                    report(
                        f"OpenSandbox {args.flood_mib} MiB stdout drained: seconds (the SDK "
                        f"keeps every line: {args.sdk_flood_mib} MiB took {sdk_seconds:.1f} s)",
                        mango=seconds,
                        unit="s",
                    )
                    report(
                        f"OpenSandbox {args.flood_mib} MiB stdout drained: mango peak RSS growth "
                        f"(SDK, {args.sdk_flood_mib} MiB: {sdk_growth:.0f} MiB)",
                        mango=growth,
                        unit="MiB",
                        goal=value_below(32),
                    )
            finally:
                fake.stop()


if __name__ == "__main__":
    asyncio.run(main())
