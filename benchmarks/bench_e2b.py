"""mango's e2b provider against the official e2b SDK, on the same fake E2B service.

Run: ``uv run python benchmarks/bench_e2b.py [--rounds N] [--create-rounds N] [--flood-mib N]``
(no credentials, no network).

* exec of ``true``: mango ``sandbox.exec`` vs the SDK's ``AsyncSandbox.commands.run``,
  interleaved rounds on one warm sandbox each, medians;
* 1 GiB of stdout (``--flood-mib``): the time to drain it and the client's
  peak RSS growth (``ru_maxrss``) while a command prints it, mango under its
  1 MiB cap vs the SDK (``retain_output=False``, output consumed by a
  callback, and its default, which keeps everything);
  each client runs in its own process against a fake in yet another process;
* create-to-first-exec and attach-after-restart (a fresh provider / a fresh
  ``AsyncSandbox.connect``) followed by one exec.
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
from pathlib import Path

from figures import ratio_at_most, report, spawn_medians, value_below

MIB = 1 << 20


def _flood_script(mib: int) -> str:
    return f"head -c {mib * MIB} /dev/zero"


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def in_sandbox_part(vendor: str, mine: float, sdks: float, rounds: int) -> None:
    """What each client's command costs in the sandbox, run here as envd runs it (``bash -l -c``).

    mango's line for ``true`` probes for ``setsid``, looks the program up as
    ``execvp`` does, and starts it in a new session (one more ``execve``): the
    price of killing the whole tree on a timeout, which envd cannot do.
    """
    from mango.provider.shell import command_line

    line = command_line(("true",), new_session=True)
    with tempfile.TemporaryDirectory() as home:
        # The fake's environment for a command (its HOME is the sandbox's workspace).
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": home, "LANG": "C.UTF-8"}
        local = spawn_medians(
            {"mango": ["bash", "-l", "-c", line], "sdk": ["bash", "-l", "-c", "true"]},
            rounds,
            cwd=Path(home),
            env=env,
        )
    print(
        f"in the sandbox (run here by bash -l -c): mango's line {local['mango']:.2f} ms, "
        f"the SDK's `true` {local['sdk']:.2f} ms"
    )
    report(
        f"{vendor} exec true, the in-sandbox part alone: mango's line (setsid, program lookup) "
        "/ `true` (both run here by bash -l -c)",
        mango=local["mango"],
        baseline=local["sdk"],
        unit="ms",
    )
    report(
        f"{vendor} exec true without the in-sandbox part: (mango - its line) / (SDK - `true`)",
        mango=mine - local["mango"],
        baseline=sdks - local["sdk"],
        unit="ms",
    )


async def _latency(rounds: int, create_rounds: int) -> None:  # noqa: PLR0915 - one scripted scenario
    from e2b import AsyncSandbox

    from mango.provider import Command, SandboxSpec
    from mango_provider_e2b import E2BProvider
    from mango_provider_e2b.conformance import e2b_fake_options
    from mango_provider_e2b.fake import E2BFakeService, FakeConfig

    with tempfile.TemporaryDirectory() as scratch:
        config = FakeConfig()
        async with E2BFakeService.create(Path(scratch), config) as fake:
            os.environ.update(
                E2B_API_URL=fake.url, E2B_SANDBOX_URL=fake.url, E2B_API_KEY=config.api_key or ""
            )

            def provider() -> E2BProvider:
                return E2BProvider(e2b_fake_options(fake.url, config), namespace="bench")

            spec = SandboxSpec(timeout=60)
            mango = provider()
            sandbox = await mango.create(f"bench-{uuid.uuid4().hex[:8]}", spec)
            sdk = await AsyncSandbox.create(template="base")
            true = Command(("true",))
            for _ in range(5):  # warm both pools
                await sandbox.exec(true)
                await sdk.commands.run("true")
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(rounds):
                start = time.perf_counter()
                assert (await sandbox.exec(true)).exit_code == 0
                ours.append(time.perf_counter() - start)
                start = time.perf_counter()
                assert (await sdk.commands.run("true")).exit_code == 0
                theirs.append(time.perf_counter() - start)
            mine, sdks = _median_ms(ours), _median_ms(theirs)
            print(f"exec true: mango {mine:.2f} ms, SDK {sdks:.2f} ms, ratio {mine / sdks:.3f}")
            report(
                "E2B exec true / e2b SDK",
                mango=mine,
                baseline=sdks,
                unit="ms",
                goal=ratio_at_most(1.0),
            )
            in_sandbox_part("E2B", mine, sdks, rounds)

            creates: list[float] = []
            attaches: list[float] = []
            sdk_creates: list[float] = []
            sdk_attaches: list[float] = []
            for _ in range(create_rounds):
                key = f"bench-{uuid.uuid4().hex[:8]}"
                start = time.perf_counter()
                made = await mango.create(key, spec)
                await made.exec(true)
                creates.append(time.perf_counter() - start)
                restarted = provider()
                start = time.perf_counter()
                again = await restarted.attach(key, made.ref, spec)
                await again.exec(true)
                attaches.append(time.perf_counter() - start)
                await restarted.aclose()
                await made.destroy()

                start = time.perf_counter()
                theirs_box = await AsyncSandbox.create(template="base")
                await theirs_box.commands.run("true")
                sdk_creates.append(time.perf_counter() - start)
                start = time.perf_counter()
                connected = await AsyncSandbox.connect(theirs_box.sandbox_id)
                await connected.commands.run("true")
                sdk_attaches.append(time.perf_counter() - start)
                await theirs_box.kill()
            print(
                f"create to first exec: mango {_median_ms(creates):.1f} ms, "
                f"SDK {_median_ms(sdk_creates):.1f} ms"
            )
            print(
                f"attach after restart + exec: mango {_median_ms(attaches):.1f} ms, "
                f"SDK {_median_ms(sdk_attaches):.1f} ms"
            )
            report(
                "E2B create to first exec / e2b SDK",
                mango=_median_ms(creates),
                baseline=_median_ms(sdk_creates),
                unit="ms",
                goal=ratio_at_most(1.0),
            )
            report(
                "E2B attach after restart + exec / e2b SDK",
                mango=_median_ms(attaches),
                baseline=_median_ms(sdk_attaches),
                unit="ms",
                goal=ratio_at_most(1.2),
            )
            await sandbox.destroy()
            await sdk.kill()
            await mango.aclose()


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _flood_client(kind: str, url: str, mib: int) -> None:
    """One client in its own process: print the peak RSS growth of a big exec (then as JSON)."""
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY="e2b_fake_key")
    from e2b import AsyncSandbox

    from mango.provider import Command, SandboxSpec
    from mango_provider_e2b import E2BProvider
    from mango_provider_e2b.conformance import e2b_fake_options
    from mango_provider_e2b.fake import FakeConfig

    flood = _flood_script(mib)
    if kind == "mango":
        provider = E2BProvider(e2b_fake_options(url, FakeConfig()), namespace="bench")
        sandbox = await provider.create(f"flood-{uuid.uuid4().hex[:8]}", SandboxSpec(timeout=600))
        await sandbox.exec(Command(("true",)))
        before = _rss_mib()
        start = time.perf_counter()
        result = await sandbox.exec(Command(("sh", "-c", flood)))
        took = time.perf_counter() - start
        assert len(result.stdout) == min(mib, 1) * MIB
        assert result.stdout_truncated == (mib > 1)
        await sandbox.destroy()
        await provider.aclose()
    else:
        box = await AsyncSandbox.create(template="base")
        await box.commands.run("true")
        seen = 0

        def count(text: str) -> None:
            nonlocal seen
            seen += len(text)

        before = _rss_mib()
        start = time.perf_counter()
        if kind == "sdk-streaming":
            await box.commands.run(flood, on_stdout=count, retain_output=False, timeout=600)
        else:
            result = await box.commands.run(flood, timeout=600)
            seen = len(result.stdout)
        took = time.perf_counter() - start
        await box.kill()
    growth = _rss_mib() - before
    print(f"{kind}: peak RSS growth {growth:.1f} MiB in {took:.1f} s")
    print(json.dumps({"seconds": took, "growth_mib": growth}))


def _memory(mib: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        fake = subprocess.Popen(
            [sys.executable, "-m", "mango_provider_e2b.fake", "--scratch", scratch],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert fake.stdout is not None
            url = fake.stdout.readline().strip()
            runs = {}
            for kind in ("mango", "sdk-streaming", "sdk-default"):
                argv = ["--flood-client", kind, "--url", url, "--flood-mib", str(mib)]
                done = subprocess.run(
                    [sys.executable, __file__, *argv],
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                lines = done.stdout.strip().splitlines()
                print(lines[0])
                runs[kind] = json.loads(lines[-1])
            report(
                f"E2B {mib} MiB stdout drained / e2b SDK streaming (retain_output=False)",
                mango=runs["mango"]["seconds"],
                baseline=runs["sdk-streaming"]["seconds"],
                unit="s",
                goal=ratio_at_most(1.0),
            )
            report(
                f"E2B {mib} MiB stdout drained: mango peak RSS growth (SDK streaming: "
                f"{runs['sdk-streaming']['growth_mib']:.0f} MiB, SDK default: "
                f"{runs['sdk-default']['growth_mib']:.0f} MiB)",
                mango=runs["mango"]["growth_mib"],
                unit="MiB",
                goal=value_below(32),
            )
        finally:
            fake.terminate()
            fake.wait(30)


def main() -> None:
    """Run every measurement and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--create-rounds", type=int, default=10)
    parser.add_argument("--flood-mib", type=int, default=1024)
    parser.add_argument("--flood-client", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood_client:
        asyncio.run(_flood_client(args.flood_client, args.url, args.flood_mib))
        return
    asyncio.run(_latency(args.rounds, args.create_rounds))
    _memory(args.flood_mib)


if __name__ == "__main__":
    main()
