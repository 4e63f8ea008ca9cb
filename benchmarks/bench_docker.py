"""Benchmark: the Docker provider against bare aiodocker and the docker CLI.

Prints, in one run (figures are reported, not asserted):

* ``exec true``: median through a warm SessionManager on the Docker provider,
  through bare aiodocker (exec create, attach until end of stream, exec
  inspect: the least any client does for an exit code), and through the
  ``docker exec`` CLI (targets: mango/aiodocker <= 1.05, mango/CLI <= 0.5);
* create-to-first-exec: ``provider.create`` + ``exec true`` against
  ``docker run -d`` + ``docker exec`` with the same flags;
* attach after a restart: a fresh provider (new connection, inspect, label
  check; the API version comes with the first answer) against one container
  inspect through a new aiodocker client (target <= 1.5), and through a warm
  one for reference;
* 32 Sessions running ``exec true`` concurrently against one after another.

The store is the in-memory one: a warm manager serves from its client cache
and does not touch the database on this path. Needs a daemon and the image
``mango-test-busybox:latest`` (``.ci/make-test-image``); nothing is pulled.
Run: ``uv run python benchmarks/bench_docker.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiodocker
from figures import report

from mango.app import InMemoryBindingStore, SessionManager
from mango.domain import Command, SandboxSpec
from mango_provider_docker import DockerProvider

IMAGE = "mango-test-busybox:latest"
LABELS = {"io.mango.benchmark": uuid.uuid4().hex[:12]}
TRUE = Command(("true",))


def _line(name: str, seconds: float, runs: int) -> None:
    print(f"  {name:<46} median {seconds * 1e3:8.2f} ms over {runs} runs")


def _verdict(label: str, ratio: float, target: float) -> None:
    print(f"  {label}: {ratio:.3f} (target <= {target}) {'OK' if ratio <= target else 'MISSED'}")


async def _interleaved(
    fns: dict[str, Callable[[], Awaitable[None]]], rounds: int
) -> dict[str, float]:
    """Median seconds per call of each function, sampled alternately under the same load."""
    for _ in range(max(rounds // 10, 3)):
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
        _line(name, median, rounds)
    return medians


async def _cli(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {err.decode().strip()}")
    return out.decode().strip()


async def bench_exec(
    provider: DockerProvider, docker: aiodocker.Docker, cli: str, rounds: int
) -> None:
    """``exec true`` three ways."""
    print("exec true")
    manager = SessionManager(provider, InMemoryBindingStore())
    await manager.ensure_session("bench-exec")
    spec = SandboxSpec()
    sandbox = await manager.acquire("bench-exec", spec)
    # SessionManager hands out a wrapper; the reference names the container.
    container_id = sandbox.ref.external_id
    container = docker.containers.container(container_id)

    async def via_mango() -> None:
        box = await manager.acquire("bench-exec", spec)
        result = await box.exec(TRUE)
        assert result.exit_code == 0, result

    async def via_aiodocker() -> None:
        execution = await container.exec(["true"])
        async with execution.start(detach=False) as stream:
            while await stream.read_out() is not None:
                pass
        info = await execution.inspect()
        assert info["ExitCode"] == 0

    async def via_cli() -> None:
        await _cli(cli, "exec", container_id, "true")

    medians = await _interleaved(
        {
            "mango: warm SessionManager exec(['true'])": via_mango,
            "bare aiodocker: exec + attach + inspect": via_aiodocker,
            "docker exec CLI": via_cli,
        },
        rounds,
    )
    mango, bare, cli_time = medians.values()
    _verdict("ratio mango/aiodocker", mango / bare, 1.05)
    _verdict("ratio mango/docker-cli", mango / cli_time, 0.5)
    report(
        "Docker exec true: warm SessionManager / bare aiodocker",
        mango=mango * 1e3,
        baseline=bare * 1e3,
        unit="ms",
    )
    report(
        "Docker exec true: warm SessionManager / `docker exec` CLI",
        mango=mango * 1e3,
        baseline=cli_time * 1e3,
        unit="ms",
    )
    await manager.delete_session("bench-exec")


async def bench_create(provider: DockerProvider, cli: str, rounds: int) -> None:
    """A new sandbox until its first command has run."""
    print("create to first exec")
    mango_times: list[float] = []
    cli_times: list[float] = []
    for index in range(rounds):
        start = time.perf_counter()
        sandbox = await provider.create(
            f"bench-create-{LABELS['io.mango.benchmark']}-{index}", SandboxSpec()
        )
        await sandbox.exec(TRUE)
        mango_times.append(time.perf_counter() - start)
        await sandbox.destroy()
        start = time.perf_counter()
        cid = await _cli(
            cli,
            "run",
            "-d",
            "--init",
            "--network",
            "none",
            "--memory",
            "1g",
            "--cpus",
            "1",
            "--pids-limit",
            "512",
            "-w",
            "/workspace",
            "--label",
            "io.mango.benchmark=cli",
            IMAGE,
            "sh",
            "-c",
            "while :; do sleep 3600; done",
        )
        await _cli(cli, "exec", cid, "true")
        cli_times.append(time.perf_counter() - start)
        await _cli(cli, "rm", "-f", cid)
    mango, cli_time = statistics.median(mango_times), statistics.median(cli_times)
    _line("mango: provider.create + exec true", mango, rounds)
    _line("docker run -d + docker exec (CLI)", cli_time, rounds)
    print(f"  ratio mango/docker-cli: {mango / cli_time:.3f}")
    report(
        "Docker create to first exec / `docker run -d` + `docker exec`",
        mango=mango * 1e3,
        baseline=cli_time * 1e3,
        unit="ms",
    )


async def bench_attach(
    provider: DockerProvider, docker: aiodocker.Docker, resource_dir: Path, rounds: int
) -> None:
    """A restarted worker's first attach against a bare inspect."""
    print("attach after restart")
    key = f"bench-attach-{LABELS['io.mango.benchmark']}"
    sandbox = await provider.create(key, SandboxSpec())

    async def fresh_attach() -> None:
        fresh = DockerProvider(resource_dir, image=IMAGE, extra_labels=LABELS)
        try:
            await fresh.attach(key, sandbox.ref, SandboxSpec())
        finally:
            await fresh.aclose()

    async def cold_inspect() -> None:
        # What any restarted client must do at least: connect, then one inspect.
        cold = aiodocker.Docker(api_version=docker.api_version)
        try:
            await cold.containers.get(sandbox.container_id)
        finally:
            await cold.close()

    async def warm_inspect() -> None:
        await docker.containers.get(sandbox.container_id)

    medians = await _interleaved(
        {
            "mango: fresh provider attach": fresh_attach,
            "bare aiodocker: new client, one inspect": cold_inspect,
            "bare aiodocker: warm client, one inspect": warm_inspect,
        },
        rounds,
    )
    attach, cold, warm = medians.values()
    _verdict("ratio attach/inspect (new client)", attach / cold, 1.5)
    print(f"  ratio attach/inspect (warm client): {attach / warm:.3f}")
    report(
        "Docker attach after restart / new aiodocker client + one inspect",
        mango=attach * 1e3,
        baseline=cold * 1e3,
        unit="ms",
    )
    await sandbox.destroy()


async def bench_concurrency(provider: DockerProvider, sessions: int) -> None:
    """Many Sessions running a command at once."""
    print(f"{sessions} sessions, exec true")
    boxes = await asyncio.gather(
        *(
            provider.create(f"bench-many-{LABELS['io.mango.benchmark']}-{index}", SandboxSpec())
            for index in range(sessions)
        )
    )
    try:
        for box in boxes:
            await box.exec(TRUE)
        start = time.perf_counter()
        for box in boxes:
            await box.exec(TRUE)
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        results = await asyncio.gather(*(box.exec(TRUE) for box in boxes))
        concurrent = time.perf_counter() - start
        assert all(result.exit_code == 0 for result in results)
        each = sequential / sessions * 1e3
        print(f"  sequential: {sequential * 1e3:8.1f} ms total ({each:.1f} ms each)")
        speedup = sequential / concurrent
        print(f"  concurrent: {concurrent * 1e3:8.1f} ms total ({speedup:.2f}x faster)")
        report(
            f"Docker {sessions} Sessions exec true: concurrent / one after another",
            mango=concurrent * 1e3,
            baseline=sequential * 1e3,
            unit="ms",
        )
    finally:
        await asyncio.gather(*(box.destroy() for box in boxes))


async def main(rounds: int, create_rounds: int, sessions: int) -> None:
    cli = shutil.which("docker")
    if cli is None:
        raise SystemExit("the docker CLI is needed for the comparison")
    with tempfile.TemporaryDirectory() as tmp:
        resource_dir = Path(tmp)
        provider = DockerProvider(
            resource_dir, image=IMAGE, extra_labels=LABELS, pull_missing_images=False
        )
        docker = aiodocker.Docker()
        try:
            await docker.version()  # negotiates the API version, outside every timing
            await bench_exec(provider, docker, cli, rounds)
            await bench_create(provider, cli, create_rounds)
            await bench_attach(provider, docker, resource_dir, rounds)
            await bench_concurrency(provider, sessions)
        finally:
            await docker.close()
            await provider.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--create-rounds", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.create_rounds, args.sessions))
