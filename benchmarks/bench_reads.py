"""Benchmark: peak memory reading an 8 GiB sparse file and streaming a write, local and Docker.

A sandbox makes an 8 GiB sparse file for free (``dd ... seek=8G``); a worker
that loaded it would need 8 GiB. Each scenario runs in a fresh process (so
its peak is its own) that creates a sandbox, makes the file, and then either

* ``read_file`` with the default bound (``MANGO_MAX_READ_BYTES``, 16 MiB): it
  must fail at once with ``FileTooLarge`` from the size check, or
* ``open_file`` and reads every chunk to the end (8 GiB through the process),
* or (no sparse file) ``write_stream`` of ``--write-gib`` GiB (default 1) of
  generated 1 MiB chunks: the streamed write ``mango files write`` uses.

Printed per scenario: the process's peak RSS (``VmHWM``) before the read and
after it, the growth, the wall time and the bytes streamed. Target: peak RSS
< 64 MiB during the read. Figures are reported, not asserted.
Run: ``uv run python benchmarks/bench_reads.py [--size-gib N] [--write-gib N]
[--only local|docker]``
(Docker needs a daemon and ``mango-test-busybox:latest``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from figures import report, value_below

from mango.domain import Command, FileTooLarge, SandboxSpec

IMAGE = "mango-test-busybox:latest"


def _vm_hwm() -> int:
    """This process's peak resident set size, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def _generated(size: int) -> AsyncIterator[bytes]:
    """``size`` bytes in 1 MiB chunks, each made when it is asked for (a fresh object each)."""
    chunk = 1024 * 1024
    index = 0
    while size > 0:
        piece = min(chunk, size)
        yield index.to_bytes(8, "big") * (piece // 8) + bytes(piece % 8)
        size -= piece
        index += 1


async def _child(provider_name: str, mode: str, size: int) -> dict[str, object]:
    scratch = Path(tempfile.mkdtemp(prefix="mango-bench-reads-"))
    if provider_name == "local":
        from mango.local import LocalProvider

        provider = LocalProvider(scratch / "sandboxes")
    else:
        from mango_provider_docker import DockerProvider

        provider = DockerProvider(
            scratch / "docker",
            image=IMAGE,
            pull_missing_images=False,
            extra_labels={"io.mango.benchmark": uuid.uuid4().hex[:12]},
        )
    sandbox = await provider.create(f"bench-reads-{uuid.uuid4().hex[:8]}", SandboxSpec())
    try:
        if mode != "write_stream":
            made = await sandbox.exec(
                Command(("sh", "-c", f"dd if=/dev/null of=huge.bin bs=1 count=0 seek={size}"))
            )
            assert made.exit_code == 0, made.stderr
        before = _vm_hwm()
        started = time.perf_counter()
        streamed = 0
        outcome = "ok"
        if mode == "write_stream":
            await sandbox.write_stream("written.bin", _generated(size))
            listed = await sandbox.exec(Command(("sh", "-c", "wc -c < written.bin")))
            written = int(listed.stdout.decode().strip() or 0)
            streamed = written
            outcome = "complete" if written == size else f"short by {size - written}"
        elif mode == "read_file":
            try:
                await sandbox.read_file("huge.bin")
            except FileTooLarge as exc:
                outcome = f"FileTooLarge(size={exc.size}, limit={exc.limit})"
        else:
            async with sandbox.open_file("huge.bin") as chunks:
                async for chunk in chunks:
                    streamed += len(chunk)
            outcome = "complete" if streamed == size else f"short by {size - streamed}"
        elapsed = time.perf_counter() - started
        after = _vm_hwm()
    finally:
        await sandbox.destroy()
        await provider.aclose()
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "before": before,
        "after": after,
        "seconds": elapsed,
        "streamed": streamed,
        "outcome": outcome,
    }


def _run(provider_name: str, mode: str, size: int) -> None:
    completed = subprocess.run(
        [sys.executable, __file__, "--child", provider_name, mode, "--size", str(size)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        print(f"  {provider_name:<6} {mode:<9} FAILED: {completed.stderr.strip()[-400:]}")
        report(f"{provider_name} {mode} of a sparse file: FAILED", mango=None, unit="MiB")
        return
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    mib = 1024 * 1024
    before, after = int(figures["before"]), int(figures["after"])
    rate = ""
    if figures["streamed"]:
        rate = f", {int(figures['streamed']) / float(figures['seconds']) / mib:,.0f} MiB/s"
    verdict = "OK" if after < 64 * mib else "MISSED"  # the read's target, and the write's
    print(
        f"  {provider_name:<6} {mode:<9} peak RSS {after / mib:6.1f} MiB "
        f"(before the read {before / mib:5.1f} MiB, growth {(after - before) / mib:5.1f} MiB) "
        f"in {float(figures['seconds']):7.2f} s{rate}; {figures['outcome']} "
        f"[target < 64 MiB: {verdict}]"
    )
    report(
        f"{provider_name} {mode} of a {size / 1024**3:g} GiB "
        f"{'stream' if mode == 'write_stream' else 'sparse file'}: peak RSS "
        f"({figures['outcome']})",
        mango=after / mib,
        unit="MiB",
        goal=value_below(64),
    )


def main() -> None:
    """Run every scenario in its own process, or one scenario as that process (``--child``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("PROVIDER", "MODE"))
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--size-gib", type=float, default=8.0)
    parser.add_argument("--write-gib", type=float, default=1.0)
    parser.add_argument("--only", choices=["local", "docker"])
    args = parser.parse_args()
    if args.child:
        provider_name, mode = args.child
        print(json.dumps(asyncio.run(_child(provider_name, mode, args.size))))
        return
    size = int(args.size_gib * 1024**3)
    print(f"reading a sparse file of {size:,} bytes")
    for provider_name in ("local", "docker"):
        if args.only and provider_name != args.only:
            continue
        for mode in ("read_file", "open_file"):
            _run(provider_name, mode, size)
        _run(provider_name, "write_stream", int(args.write_gib * 1024**3))


if __name__ == "__main__":
    main()
