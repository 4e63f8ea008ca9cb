"""Benchmark: File Resource import and Session output export on Docker, memory and throughput.

Two scenarios, each in a fresh process that opens ``mango.open_session_manager()``
(``MANGO_SANDBOX=docker``, a real PostgreSQL: an embedded server started for
the run):

* ``import``: a 1 GiB stored file (random bytes, on the filesystem store) is
  added as a File Resource and materialized into a new sandbox: streamed from
  the store, hashed, written to the sandbox's host directory, fsynced and
  renamed. Baseline: a plain ``cp`` of the same file to the same disk (the
  resource directory), with an ``fsync`` (``sync FILE``) as the import does.
* ``export``: the sandbox writes 500 files of 2 MiB (1000 MiB) below
  ``/mnt/session/outputs``; ``publish_outputs`` exports them twice as the
  Engine's tar stream (inspect, then publish) and uploads each to the Files
  store (the filesystem store, and the S3 store against moto's S3 server on
  127.0.0.1). Baseline: a plain ``tar`` of the host's outputs directory,
  piped to ``cat > /dev/null`` (so tar reads every byte).

Printed per scenario: the process's peak RSS (``VmHWM``) before and after,
the growth (target < 64 MiB), the wall time, the throughput and the ratio to
the baseline (import target >= 0.8x). Figures are reported, not asserted.

Needs a running dockerd and ``mango-test-busybox:latest`` (``.ci/make-test-image``).
Run: ``uv run python benchmarks/bench_resources.py [--size-mib N] [--files N]
[--only import|fs|s3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

MiB = 1024 * 1024
IMAGE = "mango-test-busybox:latest"

_MOTO = """
import signal
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
"""


def _vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def _child(scenario: str, argument: str, count: int) -> dict[str, object]:
    import mango
    from mango.domain import Command

    session = f"bench-{scenario}-{uuid.uuid4().hex[:8]}"
    spec = mango.SandboxSpec(timeout=600.0)
    async with mango.open_session_manager() as manager:
        files = manager.session_files
        try:
            await manager.ensure_session(session)
            sandbox = await manager.acquire(session, spec)
            if scenario == "import":
                stored = await files.files.put_path(argument)
                moved = stored.size or 0
                await manager.materialize(session, spec)  # warm: nothing to do yet but the rows
                await manager.add_file_resource(session, stored.file_id, "bench.bin")
                before = _vm_hwm()
                started = time.perf_counter()
                report = await manager.materialize(session, spec)
                seconds = time.perf_counter() - started
                assert report.imported == 1, report
            else:
                size_mib = int(argument)
                script = (
                    'i=0; while [ "$i" -lt "$1" ]; do '
                    'dd if=/dev/zero of="/mnt/session/outputs/f$i.bin" bs=1048576 count="$2" '
                    "2>/dev/null; i=$((i + 1)); done"
                )
                made = await sandbox.exec(
                    Command(("sh", "-c", script, "sh", str(count), str(size_mib)))
                )
                assert made.exit_code == 0, made
                moved = count * size_mib * MiB
                await files.list_outputs(session)
                before = _vm_hwm()
                started = time.perf_counter()
                published = await manager.publish_outputs(session, spec)
                seconds = time.perf_counter() - started
                assert published is not None, "the Session has no sandbox"
                assert published.published == count, published
            after = _vm_hwm()
            host_dir = str(getattr(sandbox, "inner", sandbox).host_dir)
        finally:
            await manager.delete_session(session)
    return {
        "bytes": moved,
        "seconds": seconds,
        "hwm_before": before,
        "hwm_after": after,
        "host_dir": host_dir,
    }


def _scenario(env: dict[str, str], scenario: str, argument: str, count: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", scenario, argument, str(count)],
        capture_output=True,
        env=env,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{scenario} failed:\n{done.stderr.decode(errors='replace')}")
    result: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    return result


def _timed(argv: list[str], *, shell: bool = False) -> float:
    started = time.perf_counter()
    subprocess.run(argv if not shell else " ".join(argv), shell=shell, check=True)
    return time.perf_counter() - started


def _start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", _MOTO], stdout=subprocess.PIPE, stderr=sink
        )
    assert process.stdout is not None
    return process, f"http://127.0.0.1:{int(process.stdout.readline())}"


def _make_bucket(endpoint: str) -> str:
    import httpx

    name = f"mango-bench-{uuid.uuid4().hex[:12]}"
    httpx.put(f"{endpoint}/{name}", timeout=30).raise_for_status()
    return name


def _row(name: str, result: dict[str, object], baseline: float) -> str:
    before = int(str(result["hwm_before"])) / MiB
    after = int(str(result["hwm_after"])) / MiB
    seconds = float(str(result["seconds"]))
    moved = int(str(result["bytes"])) / MiB
    return (
        f"{name:14} {before:8.1f} {after:8.1f} {after - before:8.1f} {seconds:8.2f} "
        f"{moved / seconds:8.1f} {baseline:9.2f} {baseline / seconds:6.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="the File Resource's size")
    parser.add_argument("--files", type=int, default=500, help="output files (2 MiB each)")
    parser.add_argument("--only", choices=["import", "fs", "s3"])
    parser.add_argument("--child", nargs=3, metavar=("SCENARIO", "ARGUMENT", "COUNT"))
    args = parser.parse_args()
    if args.child:
        scenario, argument, count = args.child
        print(json.dumps(asyncio.run(_child(scenario, argument, int(count)))))
        return

    from mango.embedded import EmbeddedPostgres

    scratch = Path(tempfile.mkdtemp(prefix="mango-bench-resources-"))
    scratch.chmod(0o711)  # as root, the embedded PostgreSQL runs as an unprivileged account
    moto: subprocess.Popen[bytes] | None = None
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "AWS_"))}
        resources = scratch / "docker"
        with EmbeddedPostgres(scratch / "pgdata") as url:
            common = {
                **base,
                "MANGO_DATABASE_URL": url,
                "MANGO_STATE_DIR": str(scratch),
                "MANGO_SANDBOX": "docker",
                "MANGO_SANDBOX_IMAGE": IMAGE,
                "MANGO_SANDBOX_PULL": "0",
                "MANGO_SANDBOX_RESOURCE_DIR": str(resources),
                "MANGO_FILE_STORE": "fs",
                "MANGO_FILE_STORE_DIR": str(scratch / "blobs"),
            }
            print("growth = peak RSS after - peak RSS before (MiB); ratio = baseline / mango time")
            print(
                f"{'scenario':14} {'before':>8} {'after':>8} {'growth':>8} {'seconds':>8} "
                f"{'MiB/s':>8} {'baseline':>9} {'ratio':>7}"
            )
            if args.only in (None, "import"):
                source = scratch / "source.bin"
                with source.open("wb") as handle:
                    for _ in range(args.size_mib):
                        handle.write(os.urandom(MiB))
                resources.mkdir(parents=True, exist_ok=True)
                copy = resources / "cp-baseline.bin"
                baseline = _timed(["cp", str(source), str(copy)]) + _timed(["sync", str(copy)])
                copy.unlink()
                result = _scenario(common, "import", str(source), 1)
                print(_row(f"import {args.size_mib} MiB", result, baseline))
            kinds = [args.only] if args.only in ("fs", "s3") else [] if args.only else ["fs", "s3"]
            for kind in kinds:
                env = dict(common)
                if kind == "s3":
                    moto, endpoint = _start_moto(scratch / "moto.log")
                    env.update(
                        MANGO_FILE_STORE="s3",
                        MANGO_S3_ENDPOINT_URL=endpoint,
                        MANGO_S3_BUCKET=_make_bucket(endpoint),
                        MANGO_S3_PREFIX="bench",
                        AWS_ACCESS_KEY_ID="bench",
                        AWS_SECRET_ACCESS_KEY="bench-secret",  # noqa: S106 - moto's dummy
                        AWS_DEFAULT_REGION="us-east-1",
                    )
                outputs = scratch / "tar-baseline"
                outputs.mkdir(exist_ok=True)
                for index in range(args.files):
                    (outputs / f"f{index}.bin").write_bytes(bytes(2 * MiB))
                # A pipe, so GNU tar cannot see /dev/null and skip reading the files.
                baseline = _timed([f"tar -cf - -C {outputs} . | cat > /dev/null"], shell=True)  # noqa: S604
                shutil.rmtree(outputs)
                result = _scenario(env, "export", "2", args.files)
                print(_row(f"export {kind} {args.files}", result, baseline))
    finally:
        if moto is not None:
            moto.send_signal(signal.SIGTERM)
            moto.wait(timeout=60)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
