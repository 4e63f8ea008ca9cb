"""mango's cube provider against the official ``cubesandbox`` SDK, on the same fake (Cube mode).

Run: ``uv run python benchmarks/bench_cube.py [--rounds N] [--create-rounds N] [--flood-mib N]``
(no credentials, no network). The fake E2B service runs in Cube mode in its
own process (``python -m mango_provider_e2b.fake --cube``); its commands are
real local processes. Figures are reported, not asserted:

* ``exec true`` on a warm sandbox: mango ``sandbox.exec`` against the SDK's
  ``sandbox.commands.run("true")``, interleaved rounds, medians;
* create-to-first-exec, and attach after a restart (a fresh provider /
  ``Sandbox.connect``) followed by one exec, medians;
* a command printing ``--flood-mib`` MiB (1 GiB by default) to stdout, mango
  under its 1 MiB cap: the time to drain it and the client's peak RSS growth,
  in a client process of its own. The SDK has no streaming exec (its
  ``commands.run`` returns the whole output), so its flood is the buffered
  one, at most 64 MiB, for contrast.

The SDK is synchronous: its calls block this process's event loop, which is
free to block, since the fake serves from another process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

from bench_e2b import in_sandbox_part
from figures import ratio_at_most, report, value_below

API_KEY = "cube_fake_key"
DOMAIN = "cube.local"
MIB = 1 << 20
SDK_FLOOD_MAX_MIB = 64


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sdk_config(url: str) -> object:
    from cubesandbox import Config

    address = urlsplit(url)
    return Config(
        api_url=url,
        api_key=API_KEY,
        template_id="base",
        proxy_node_ip=address.hostname,
        proxy_port=address.port or 80,
        sandbox_domain=DOMAIN,
        request_timeout=600.0,
    )


def _provider(url: str) -> object:
    from mango_provider_e2b import E2BProvider
    from mango_provider_e2b.conformance import cube_fake_options
    from mango_provider_e2b.fake import CUBE_MODE, FakeConfig

    config = FakeConfig(mode=CUBE_MODE, api_key=API_KEY, domain=DOMAIN)
    return E2BProvider(cube_fake_options(url, config), namespace="bench")


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


async def latency(url: str, rounds: int, create_rounds: int) -> dict[str, float]:
    """Medians (ms) of exec true, create-to-first-exec and attach+exec, mango and SDK."""
    from cubesandbox import Sandbox

    from mango.provider import Command, SandboxSpec

    config = _sdk_config(url)
    spec = SandboxSpec(timeout=60)
    true = Command(("true",))
    mango = _provider(url)
    sandbox = await mango.create(f"bench-{uuid.uuid4().hex[:8]}", spec)  # type: ignore[attr-defined]
    sdk = Sandbox.create(config=config)
    for _ in range(5):  # warm both pools
        await sandbox.exec(true)
        sdk.commands.run("true")
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        assert (await sandbox.exec(true)).exit_code == 0
        ours.append(time.perf_counter() - start)
        theirs.append(_timed(lambda: sdk.commands.run("true")))
    figures = {"exec": _median_ms(ours), "sdk_exec": _median_ms(theirs)}

    creates: list[float] = []
    attaches: list[float] = []
    sdk_creates: list[float] = []
    sdk_attaches: list[float] = []
    for _ in range(create_rounds):
        key = f"bench-{uuid.uuid4().hex[:8]}"
        start = time.perf_counter()
        made = await mango.create(key, spec)  # type: ignore[attr-defined]
        await made.exec(true)
        creates.append(time.perf_counter() - start)
        restarted = _provider(url)
        start = time.perf_counter()
        again = await restarted.attach(key, made.ref, spec)  # type: ignore[attr-defined]
        await again.exec(true)
        attaches.append(time.perf_counter() - start)
        await restarted.aclose()  # type: ignore[attr-defined]
        await made.destroy()

        start = time.perf_counter()
        box = Sandbox.create(config=config)
        box.commands.run("true")
        sdk_creates.append(time.perf_counter() - start)
        start = time.perf_counter()
        connected = Sandbox.connect(box.sandbox_id, config=config)
        connected.commands.run("true")
        sdk_attaches.append(time.perf_counter() - start)
        box.kill()
    figures |= {
        "create": _median_ms(creates),
        "sdk_create": _median_ms(sdk_creates),
        "attach": _median_ms(attaches),
        "sdk_attach": _median_ms(sdk_attaches),
    }
    await sandbox.destroy()
    sdk.kill()
    await mango.aclose()  # type: ignore[attr-defined]
    return figures


async def flood_client(kind: str, url: str, mib: int) -> dict[str, float]:
    """One client in its own process: the seconds and peak RSS growth of a big stdout."""
    from cubesandbox import Sandbox

    from mango.provider import Command, SandboxSpec

    script = f"head -c {mib * MIB} /dev/zero"
    if kind == "mango":
        provider = _provider(url)
        sandbox = await provider.create(f"flood-{uuid.uuid4().hex[:8]}", SandboxSpec(timeout=900))  # type: ignore[attr-defined]
        await sandbox.exec(Command(("true",)))
        before = _rss_mib()
        start = time.perf_counter()
        result = await sandbox.exec(Command(("sh", "-c", script), timeout=900))
        took = time.perf_counter() - start
        assert len(result.stdout) == min(mib * MIB, MIB)
        await sandbox.destroy()
        await provider.aclose()  # type: ignore[attr-defined]
    else:
        box = Sandbox.create(config=_sdk_config(url))
        box.commands.run("true")
        before = _rss_mib()
        start = time.perf_counter()
        box.commands.run(script, timeout=900)
        took = time.perf_counter() - start
        box.kill()
    return {"seconds": took, "growth_mib": _rss_mib() - before}


def _flood(url: str, kind: str, mib: int) -> dict[str, float]:
    output = subprocess.run(
        [sys.executable, __file__, "--flood-client", kind, "--url", url, "--flood-mib", str(mib)],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    """Run every measurement against one fake in Cube mode and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--create-rounds", type=int, default=10)
    parser.add_argument("--flood-mib", type=int, default=1024)
    parser.add_argument("--flood-client", choices=["mango", "sdk"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood_client:
        print(json.dumps(asyncio.run(flood_client(args.flood_client, args.url, args.flood_mib))))
        return
    with tempfile.TemporaryDirectory() as scratch:
        fake = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mango_provider_e2b.fake",
                "--cube",
                "--api-key",
                API_KEY,
                "--scratch",
                scratch,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert fake.stdout is not None
            url = fake.stdout.readline().strip()
            m = asyncio.run(latency(url, args.rounds, args.create_rounds))
            for label, mine, sdk, goal in (
                ("exec true", "exec", "sdk_exec", ratio_at_most(1.0)),
                ("create to first exec", "create", "sdk_create", ratio_at_most(1.0)),
                ("attach after restart + exec", "attach", "sdk_attach", ratio_at_most(1.2)),
            ):
                print(f"{label}: mango {m[mine]:.2f} ms, SDK {m[sdk]:.2f} ms")
                report(
                    f"Cube {label} / cubesandbox SDK",
                    mango=m[mine],
                    baseline=m[sdk],
                    unit="ms",
                    goal=goal,
                )
            in_sandbox_part("Cube", m["exec"], m["sdk_exec"], args.rounds)
            ours = _flood(url, "mango", args.flood_mib)
            sdk_mib = min(args.flood_mib, SDK_FLOOD_MAX_MIB)
            theirs = _flood(url, "sdk", sdk_mib)
            print(
                f"{args.flood_mib} MiB stdout, mango (1 MiB kept): {ours['seconds']:.1f} s, "
                f"peak RSS growth {ours['growth_mib']:.1f} MiB; SDK (buffered, {sdk_mib} MiB): "
                f"{theirs['seconds']:.1f} s, {theirs['growth_mib']:.1f} MiB"
            )
            report(
                f"Cube {args.flood_mib} MiB stdout drained: seconds (the SDK cannot stream)",
                mango=ours["seconds"],
                unit="s",
            )
            report(
                f"Cube {args.flood_mib} MiB stdout drained: mango peak RSS growth",
                mango=ours["growth_mib"],
                unit="MiB",
                goal=value_below(32),
            )
        finally:
            fake.terminate()
            fake.wait(30)


if __name__ == "__main__":
    main()
