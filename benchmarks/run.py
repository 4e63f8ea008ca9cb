"""Run the benchmarks and print one table: figure, mango, baseline, ratio, goal, met.

Run: ``uv run python benchmarks/run.py [--quick] [--only NAMES] [--json FILE]``.

Each benchmark script (``bench_*.py`` beside this file) runs in a process of
its own, as it would by hand, with ``MANGO_BENCH_FIGURES`` naming a file it
appends its figures to (see :mod:`figures`); its own printout goes to this
process's stderr as it runs, the table to stdout at the end. ``--quick``
passes each script small rounds and floods (the whole quick run takes a few
minutes; its figures are noisier, and its floods smaller than the goals'
1 GiB); the full run uses each script's own defaults. ``--only`` takes
benchmark names (comma-separated): local, temporal, cli, docker, e2b, cube,
daytona, opensandbox, reads, import. ``--json FILE`` writes the same rows as
``{"figures": [{"name", "mango", "baseline", "ratio", "goal", "unit", "met"}]}``.

A benchmark that fails or cannot run here (no Docker Engine, say) is listed
after the table and makes the exit status 1; the goals that are missed do
not: figures are reported, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from figures import Figure, load_all

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Benchmark:
    """One script and its arguments for a full and a quick run."""

    name: str
    script: str
    quick: tuple[str, ...]
    full: tuple[str, ...] = ()
    needs_docker: bool = False


BENCHMARKS = (
    Benchmark("local", "bench_local_exec.py", ("--rounds", "100")),
    Benchmark("temporal", "bench_temporal_overhead.py", ("--rounds", "40")),
    Benchmark("cli", "bench_cli.py", ("--rounds", "8")),
    Benchmark(
        "docker",
        "bench_docker.py",
        ("--rounds", "20", "--create-rounds", "3", "--sessions", "8"),
        needs_docker=True,
    ),
    Benchmark(
        "e2b", "bench_e2b.py", ("--rounds", "20", "--create-rounds", "3", "--flood-mib", "64")
    ),
    Benchmark(
        "cube", "bench_cube.py", ("--rounds", "20", "--create-rounds", "3", "--flood-mib", "64")
    ),
    Benchmark(
        "daytona", "bench_daytona.py", ("--runs", "20", "--create-runs", "3", "--flood-mib", "64")
    ),
    Benchmark(
        "opensandbox",
        "bench_opensandbox.py",
        ("--rounds", "8", "--flood-mib", "8", "--sdk-flood-mib", "8"),
    ),
    Benchmark("reads", "bench_reads.py", ("--size-gib", "0.25", "--write-gib", "0.25")),
    Benchmark("skills", "bench_skills.py", ("--rounds", "20"), needs_docker=True),
    Benchmark("import", "bench_import.py", ("--rounds", "5")),
    Benchmark(
        "scale",
        "bench_scale.py",
        ("--sessions", "1,10,100", "--store", "1000", "--rounds", "2", "--runs", "3"),
    ),
)
"""Every benchmark, in the order of the table."""

DOCKER_IMAGE = "mango-test-busybox:latest"


def _docker_missing() -> str | None:
    """Why Docker benchmarks cannot run here, or None."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    probe = subprocess.run(
        ["docker", "image", "inspect", DOCKER_IMAGE], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return f"no Docker Engine or no {DOCKER_IMAGE} (bash .ci/make-test-image)"
    return None


def _run(benchmark: Benchmark, quick: bool, scratch: Path) -> tuple[list[Figure], str | None]:
    """Run one script; its figures, and why it failed (None if it did not)."""
    sink = scratch / f"{benchmark.name}.jsonl"
    # Byte code is cached, as for any installed package: PYTHONDONTWRITEBYTECODE
    # would add every module's compile time to each fresh interpreter's figure.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["MANGO_BENCH_FIGURES"] = str(sink)
    argv = [sys.executable, str(HERE / benchmark.script)]
    argv += benchmark.quick if quick else benchmark.full
    print(f"=== {benchmark.name}: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=sys.stderr, check=False)
    took = time.perf_counter() - start
    print(f"=== {benchmark.name}: {took:.0f} s", file=sys.stderr, flush=True)
    failure = None if done.returncode == 0 else f"exited with {done.returncode}"
    return load_all(sink), failure


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if value else "0"


def _table(figures: list[Figure]) -> str:
    """The figures as one Markdown table."""
    lines = [
        "| figure | mango | baseline | ratio | goal | met |",
        "| --- | ---: | ---: | ---: | --- | :---: |",
    ]
    for figure in figures:
        unit = f" {figure.unit}"
        mango = _number(figure.mango) + (unit if figure.mango is not None else "")
        baseline = _number(figure.baseline) + (unit if figure.baseline is not None else "")
        ratio = "-" if figure.ratio is None else f"{figure.ratio:.2f}"
        goal = "-" if figure.goal is None else figure.goal.text(figure.unit)
        met = {True: "yes", False: "no", None: "-"}[figure.met]
        lines.append(f"| {figure.name} | {mango} | {baseline} | {ratio} | {goal} | {met} |")
    return "\n".join(lines)


def main() -> int:
    """Run the chosen benchmarks; print the table; write the JSON rows if asked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small rounds and floods")
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--json", type=Path, help="write the rows to this file")
    args = parser.parse_args()
    chosen = list(BENCHMARKS)
    if args.only:
        names = [name.strip() for name in args.only.split(",") if name.strip()]
        known = {benchmark.name for benchmark in BENCHMARKS}
        unknown = sorted(set(names) - known)
        if unknown:
            parser.error(f"unknown benchmark(s) {unknown}; choose from {sorted(known)}")
        chosen = [benchmark for benchmark in BENCHMARKS if benchmark.name in names]
    docker_missing = _docker_missing() if any(b.needs_docker for b in chosen) else None
    figures: list[Figure] = []
    problems: list[str] = []
    load = os.getloadavg()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mango-bench-run-") as tmp:
        for benchmark in chosen:
            if benchmark.needs_docker and docker_missing is not None:
                problems.append(f"{benchmark.name}: not run ({docker_missing})")
                continue
            got, failure = _run(benchmark, args.quick, Path(tmp))
            figures += got
            if failure is not None:
                problems.append(f"{benchmark.name}: {failure}")
            elif not got:
                problems.append(f"{benchmark.name}: reported no figure")
    took = time.perf_counter() - start
    after = os.getloadavg()
    print(_table(figures))
    print(
        f"\n{'quick' if args.quick else 'full'} run, {took:.0f} s; "
        f"load average {load[0]:.1f} at the start, {after[0]:.1f} at the end; "
        f"{os.cpu_count()} CPUs"
    )
    for problem in problems:
        print(f"NOT MEASURED: {problem}")
    if args.json is not None:
        rows = {"figures": [figure.row() for figure in figures]}
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
