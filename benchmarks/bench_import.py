"""Benchmark: what importing the provider-author surface costs.

A backend plugin imports :mod:`mango.provider` when mango loads it, so its
import time is paid by every ``mango`` command and worker start. Prints, in one
run, the median wall time of a fresh interpreter that imports each module
against ``python -c pass`` (interleaved, so both see the same machine load), and
whether any heavy library (temporalio, psycopg, click, httpx, aiohttp, aiodocker)
was imported along the way.

Run: ``uv run python benchmarks/bench_import.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from figures import report

HEAVY = ("temporalio", "psycopg", "psycopg_pool", "click", "httpx", "aiohttp", "aiodocker")
MODULES = ("mango.provider", "mango.provider.http", "mango_provider_docker.plugin")


def _wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def _heavy_loaded(module: str) -> list[str]:
    code = f"import sys, {module}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return done.stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"pass": [], **{m: [] for m in MODULES}}
    for _ in range(args.rounds):
        samples["pass"].append(_wall("pass"))
        for module in MODULES:
            samples[module].append(_wall(f"import {module}"))
    base = statistics.median(samples["pass"])
    print(f"python -c pass: {base * 1000:.1f} ms (median of {args.rounds})")
    for module in MODULES:
        median = statistics.median(samples[module])
        heavy = ", ".join(_heavy_loaded(module)) or "none"
        print(
            f"import {module}: {median * 1000:.1f} ms, "
            f"+{(median - base) * 1000:.1f} ms over bare python; heavy libraries: {heavy}"
        )
        report(
            f"import {module} (fresh interpreter; heavy libraries: {heavy})",
            mango=median * 1000,
            baseline=base * 1000,
            unit="ms",
        )


if __name__ == "__main__":
    main()
