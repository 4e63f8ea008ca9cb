"""Benchmark: peak memory and time of a 1 GiB put and get through the Files store.

For each store (the filesystem store, and the S3 store against moto's S3
server on 127.0.0.1) and each direction, a fresh process opens
``mango.open_file_store()`` (a real PostgreSQL: an embedded server started
for the run), then

* ``put``: ``StoredFiles.put_path`` of a 1 GiB file (sparse: reading it costs
  no disk, so the figure is mango's own work: hashing, writing, uploading);
* ``get``: ``StoredFiles.open`` of that file, every chunk read and dropped
  (each byte verified against the recorded size and SHA-256).

Printed per scenario: the process's peak RSS (``VmHWM``) once everything is
open, after the transfer, the growth, the wall time and the throughput.
Target: growth < 64 MiB. Figures are reported, not asserted.

Run: ``uv run python benchmarks/bench_file_store.py [--size-mib N] [--only fs|s3]``.
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

_MOTO = """
import signal
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
"""


def _vm_hwm() -> int:
    """This process's peak resident set size, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def _child(direction: str, argument: str) -> dict[str, object]:
    import mango

    async with mango.open_file_store() as files:
        # Everything the transfer needs is imported and connected before the baseline.
        await files.list_files(1)
        before = _vm_hwm()
        started = time.perf_counter()
        if direction == "put":
            stored = await files.put_path(argument)
            moved, file_id = stored.size or 0, stored.file_id
        else:
            moved, file_id = 0, argument
            async with files.open(file_id) as chunks:
                async for chunk in chunks:
                    moved += len(chunk)
        seconds = time.perf_counter() - started
        after = _vm_hwm()
    return {
        "file_id": file_id,
        "bytes": moved,
        "seconds": seconds,
        "hwm_before": before,
        "hwm_after": after,
    }


def _scenario(env: dict[str, str], direction: str, argument: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", direction, argument],
        capture_output=True,
        env=env,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{direction} failed:\n{done.stderr.decode(errors='replace')}")
    result: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    return result


def _start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", _MOTO], stdout=subprocess.PIPE, stderr=sink
        )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}"


def _make_bucket(endpoint: str) -> str:
    import httpx

    name = f"mango-bench-{uuid.uuid4().hex[:12]}"
    httpx.put(f"{endpoint}/{name}", timeout=30).raise_for_status()
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--only", choices=["fs", "s3"])
    parser.add_argument("--child", nargs=2, metavar=("DIRECTION", "ARGUMENT"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child(*args.child))))
        return

    from mango.embedded import EmbeddedPostgres

    scratch = Path(tempfile.mkdtemp(prefix="mango-bench-files-"))
    scratch.chmod(0o711)  # as root, the embedded PostgreSQL runs as an unprivileged account
    moto: subprocess.Popen[bytes] | None = None
    try:
        source = scratch / "source.bin"
        with source.open("wb") as handle:
            handle.truncate(args.size_mib * MiB)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "AWS_"))}
        kinds = [args.only] if args.only else ["fs", "s3"]
        with EmbeddedPostgres(scratch / "pgdata") as url:
            envs: dict[str, dict[str, str]] = {}
            common = {**base, "MANGO_DATABASE_URL": url, "MANGO_STATE_DIR": str(scratch)}
            if "fs" in kinds:
                envs["fs"] = {
                    **common,
                    "MANGO_FILE_STORE": "fs",
                    "MANGO_FILE_STORE_DIR": str(scratch / "blobs"),
                }
            if "s3" in kinds:
                moto, endpoint = _start_moto(scratch / "moto.log")
                envs["s3"] = {
                    **common,
                    "MANGO_FILE_STORE": "s3",
                    "MANGO_S3_ENDPOINT_URL": endpoint,
                    "MANGO_S3_BUCKET": _make_bucket(endpoint),
                    "MANGO_S3_PREFIX": "bench",
                    "AWS_ACCESS_KEY_ID": "bench",
                    "AWS_SECRET_ACCESS_KEY": "bench-secret",
                    "AWS_DEFAULT_REGION": "us-east-1",
                }
            print(f"{args.size_mib} MiB per transfer; growth = peak RSS after - peak RSS before")
            print(
                f"{'store':6} {'op':4} {'before MiB':>10} {'after MiB':>10} {'growth MiB':>10} "
                f"{'seconds':>8} {'MiB/s':>8}"
            )
            for kind, env in envs.items():
                put = _scenario(env, "put", str(source))
                get = _scenario(env, "get", str(put["file_id"]))
                for direction, result in (("put", put), ("get", get)):
                    before = int(str(result["hwm_before"])) / MiB
                    after = int(str(result["hwm_after"])) / MiB
                    seconds = float(str(result["seconds"]))
                    moved = int(str(result["bytes"])) / MiB
                    print(
                        f"{kind:6} {direction:4} {before:10.1f} {after:10.1f} "
                        f"{after - before:10.1f} {seconds:8.2f} {moved / seconds:8.1f}"
                    )
    finally:
        if moto is not None:
            moto.send_signal(signal.SIGTERM)
            moto.wait(timeout=60)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
