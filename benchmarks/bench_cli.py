"""Benchmark: the ``mango`` command line, start to exit, as a user runs it.

Prints, in one run (figures are reported, not asserted):

* warm local ``mango exec --session s -- true`` against ``python -c pass``
  (the interpreter's own start-up), interleaved pairs; target <= 150 ms;
* warm Docker ``mango exec --session s -- true`` against ``docker exec
  CONTAINER true`` on the same container, interleaved pairs; target <= 3x
  (skipped when no daemon, docker CLI or ``mango-test-busybox:latest``);
* where the local command's time goes: the same steps as ``mango exec``,
  timed phase by phase inside one fresh interpreter per round.

"Warm" means the Session exists, its sandbox is bound, and the embedded
PostgreSQL lingers from the previous command (``MANGO_EMBEDDED_IDLE_SECONDS``),
as it does for an agent running one command after another. Byte code is
cached (under a private ``PYTHONPYCACHEPREFIX``), as for any installed
package; ``PYTHONDONTWRITEBYTECODE`` would add the compile time of every
module to every run. Everything lives in a temporary state directory whose
server is stopped at the end (``mango embedded stop``).

Run: ``uv run python benchmarks/bench_cli.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from figures import ratio_at_most, report, value_at_most

MANGO = str(Path(sys.executable).with_name("mango"))
IMAGE = "mango-test-busybox:latest"

_PHASES = r"""
import time
t0 = time.perf_counter()
marks = []
def mark(name):
    marks.append((name, time.perf_counter() - t0))
import asyncio, sys
import mango.cli.main
mark("import the CLI (click, attrs, config)")
from mango.config import Settings
from mango.domain.values import Command, SandboxSpec
async def go():
    settings = Settings.from_env()
    from mango.runtime import deployment_context, open_database, select_provider
    from mango.postgres import open_store
    from mango.app import SessionManager
    mark("import the store (psycopg) and the app")
    registry, registration = select_provider(settings)
    mark("load plugins, select the provider")
    if settings.sandbox != "local":
        import mango_provider_docker.provider
        mark("import the provider (aiodocker, aiohttp)")
    async with open_database(settings, linger=True) as url:
        mark("join the embedded PostgreSQL")
        store = await open_store(url)
        mark("open the store (connect, check migrations)")
        context = await deployment_context(settings, store)
        provider = registry.open(settings.sandbox, context)
        manager = SessionManager(provider, store, registration.capabilities, registration.quirks)
        mark("open the provider")
        await manager.ensure_session(sys.argv[1])
        sandbox = await manager.acquire(sys.argv[1], SandboxSpec())
        mark("Session row, binding, attach")
        await sandbox.exec(Command(["true"]))
        mark("exec true")
        await manager.aclose()
        await store.aclose()
        mark("close the provider and the store")
    mark("release the server")
asyncio.run(go())
print(__import__("json").dumps(marks))
"""


def _environ(state: Path, extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MANGO_", "DOCKER_")) and key != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(
        MANGO_STATE_DIR=str(state),
        MANGO_EMBEDDED_IDLE_SECONDS="600",
        PYTHONPYCACHEPREFIX=str(state / "pycache"),
        **extra,
    )
    return env


def _run(argv: Sequence[str], env: Mapping[str, str]) -> float:
    start = time.perf_counter()
    completed = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {completed.stderr.decode().strip()}")
    return elapsed


def _interleaved(
    commands: Sequence[Sequence[str]], env: Mapping[str, str], rounds: int
) -> list[float]:
    """Median seconds of each command, run in turn under the same load."""
    for _ in range(3):
        for argv in commands:
            _run(argv, env)
    samples: list[list[float]] = [[] for _ in commands]
    for _ in range(rounds):
        for argv, values in zip(commands, samples, strict=True):
            values.append(_run(argv, env))
    return [statistics.median(values) for values in samples]


def _pairs(
    first: Sequence[str], second: Sequence[str], env: Mapping[str, str], rounds: int
) -> tuple[float, float]:
    """Medians of ``first`` and ``second``, run alternately under the same load."""
    a, b = _interleaved([first, second], env, rounds)
    return a, b


_STORE_IMPORTS = "import asyncio, click, attrs, cattrs, psycopg, psycopg_pool"
"""The libraries every ``mango`` command that touches the store imports (not mango's own code)."""
_DOCKER_IMPORTS = _STORE_IMPORTS + ", aiohttp, aiodocker"


def _report(name: str, mine: float, base_name: str, base: float) -> None:
    print(f"  {name:<44} median {mine * 1e3:8.1f} ms")
    print(f"  {base_name:<44} median {base * 1e3:8.1f} ms")


def local(state: Path, rounds: int) -> None:
    """Warm local exec against the interpreter's start-up, then the phase breakdown."""
    env = _environ(state, {"MANGO_DISABLE_PLUGINS": os.environ.get("MANGO_DISABLE_PLUGINS", "")})
    exec_true = [MANGO, "exec", "--session", "bench", "--", "true"]
    _run(exec_true, env)  # creates the Session, starts the server, fills the byte-code cache
    mango, python, floor = _interleaved(
        [exec_true, [sys.executable, "-c", "pass"], [sys.executable, "-c", _STORE_IMPORTS]],
        env,
        rounds,
    )
    print(f"local provider ({rounds} interleaved rounds):")
    _report("mango exec --session bench -- true", mango, "python -c pass", python)
    print(f"  {'python -c ' + repr(_STORE_IMPORTS):<44} median {floor * 1e3:8.1f} ms")
    verdict = "OK" if mango <= 0.15 else "MISSED"
    print(f"  mango exec: {mango:.3f} s (target <= 0.15 s) {verdict}")
    report(
        "warm CLI `mango exec -- true` on local (wall; baseline python -c pass)",
        mango=mango * 1e3,
        baseline=python * 1e3,
        unit="ms",
        goal=value_at_most(150),
    )
    report(
        "warm CLI `mango exec -- true` on local / python importing only the libraries it needs "
        "(asyncio, click, attrs, cattrs, psycopg, psycopg_pool)",
        mango=mango * 1e3,
        baseline=floor * 1e3,
        unit="ms",
    )

    _breakdown(env, "bench", rounds, python)


def _breakdown(env: Mapping[str, str], session: str, rounds: int, python: float) -> None:
    """The steps of ``mango exec``, timed inside fresh interpreters; medians."""
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        out = subprocess.run(
            [sys.executable, "-c", _PHASES, session], env=env, capture_output=True, check=True
        ).stdout
        previous = 0.0
        for name, at in json.loads(out):
            samples.setdefault(name, []).append(at - previous)
            previous = at
    print(f"  where the time goes (medians over {rounds} fresh interpreters):")
    print(f"    {'interpreter start-up (python -c pass)':<44} {python * 1e3:8.1f} ms")
    for name, values in samples.items():
        print(f"    {name:<44} {statistics.median(values) * 1e3:8.1f} ms")


def docker(state: Path, rounds: int) -> None:
    """Warm Docker exec against ``docker exec`` on the same container."""
    if shutil.which("docker") is None:
        print("docker: skipped (no docker CLI)")
        return
    probe = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False)
    if probe.returncode != 0:
        print(f"docker: skipped (no daemon or no {IMAGE}: run .ci/make-test-image)")
        return
    env = _environ(
        state,
        {
            "MANGO_SANDBOX": "docker",
            "MANGO_SANDBOX_IMAGE": IMAGE,
            "MANGO_SANDBOX_PULL": "0",
            "MANGO_NAMESPACE": "bench-cli",
        },
    )
    exec_true = [MANGO, "exec", "--session", "bench-docker", "--", "true"]
    _run(exec_true, env)
    listed = subprocess.run(
        [MANGO, "sessions", "list", "--json"], env=env, capture_output=True, check=True
    )
    (row,) = [r for r in json.loads(listed.stdout) if r["session_id"] == "bench-docker"]
    container = row["sandbox"].split(":", 1)[1]
    try:
        mango, cli, floor = _interleaved(
            [
                exec_true,
                ["docker", "exec", container, "true"],
                [sys.executable, "-c", _DOCKER_IMPORTS],
            ],
            env,
            rounds,
        )
        print(f"docker provider ({rounds} interleaved rounds):")
        _report(
            "mango exec --session bench-docker -- true", mango, "docker exec CONTAINER true", cli
        )
        ratio = mango / cli
        print(f"  ratio: {ratio:.2f}x (target <= 3x) {'OK' if ratio <= 3 else 'MISSED'}")
        report(
            "warm CLI `mango exec -- true` on Docker / `docker exec`",
            mango=mango * 1e3,
            baseline=cli * 1e3,
            unit="ms",
            goal=ratio_at_most(3.0),
        )
        print(f"  {'python -c ' + repr(_DOCKER_IMPORTS):<44} median {floor * 1e3:8.1f} ms")
        report(
            "Docker CLI floor: python importing only the libraries `mango exec` needs "
            "(+ aiohttp, aiodocker) / `docker exec`",
            mango=floor * 1e3,
            baseline=cli * 1e3,
            unit="ms",
        )
        python = statistics.median([_run([sys.executable, "-c", "pass"], env) for _ in range(5)])
        _breakdown(env, "bench-docker", rounds, python)
    finally:
        subprocess.run(
            [MANGO, "sessions", "delete", "bench-docker"], env=env, capture_output=True, check=False
        )


def main() -> None:
    """Run both benchmarks in a private state directory and stop its server."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--skip-docker", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mango-bench-cli-"))
    root.chmod(0o711)  # as root, the embedded server's account must reach it
    state = root / "state"
    try:
        local(state, args.rounds)
        if not args.skip_docker:
            docker(state, args.rounds)
    finally:
        subprocess.run(
            [MANGO, "embedded", "stop"], env=_environ(state, {}), capture_output=True, check=False
        )
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
