"""Benchmark: the pre-tool overhead of pinned skills on Docker, when nothing changed.

Two Sessions on Docker (a real PostgreSQL: an embedded server started for the
run), each acquired and materialized once so their skills are in place:

* ``none``: no skill pinned;
* ``ten``: 10 skills pinned (each a SKILL.md, a script and 20 small files).

Then, alternating between the two for ``--rounds`` rounds, one tool step
each: the pre-tool step (``SessionManager.materialize``: for every pinned
skill the marker and a walk of its tree, all in one thread hop under the shared
lock) and the tool
itself (``exec true``). Printed: the median of each, per Session, and the
extra time with 10 skills (issue 18's goal: at most 5 ms). Figures are
reported, not asserted.

Needs a running dockerd and ``mango-test-busybox:latest`` (``.ci/make-test-image``).
Run: ``uv run python benchmarks/bench_skills.py [--rounds N] [--skills N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from figures import report, value_at_most

IMAGE = "mango-test-busybox:latest"


def _skill(root: Path, index: int) -> Path:
    tree = root / f"skill-{index}"
    (tree / "scripts").mkdir(parents=True)
    (tree / "SKILL.md").write_text(
        f"---\nname: bench-{index}\ndescription: bench\n---\n# {index}\n"
    )
    (tree / "scripts" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (tree / "scripts" / "run.sh").chmod(0o755)
    for note in range(20):
        (tree / "docs" / str(note % 4)).mkdir(parents=True, exist_ok=True)
        (tree / "docs" / str(note % 4) / f"n{note}.md").write_text("note\n" * 40)
    return tree


async def _measure(environ: dict[str, str], scratch: Path, rounds: int, count: int) -> None:
    import mango
    from mango.domain import Command

    spec = mango.SandboxSpec()
    none, ten = f"bench-none-{uuid.uuid4().hex[:6]}", f"bench-ten-{uuid.uuid4().hex[:6]}"
    async with mango.open_session_manager(environ=environ) as manager:
        skills = manager.session_skills
        refs = [str((await skills.add(_skill(scratch / "src", n))).ref) for n in range(count)]
        await manager.create_session(none)
        await manager.create_session(ten, skills=refs)
        try:
            sandboxes = {sid: await manager.acquire(sid, spec) for sid in (none, ten)}
            first = await manager.materialize_skills(ten, spec)
            assert first.imported == count, first
            pre: dict[str, list[float]] = {none: [], ten: []}
            tool: dict[str, list[float]] = {none: [], ten: []}
            for _ in range(rounds):
                for sid in (none, ten):
                    started = time.perf_counter()
                    done = await manager.materialize_skills(sid, spec)
                    pre[sid].append(time.perf_counter() - started)
                    assert done.imported == 0, done
                    started = time.perf_counter()
                    await sandboxes[sid].exec(Command(("true",)))
                    tool[sid].append(time.perf_counter() - started)
        finally:
            for sid in (none, ten):
                await manager.delete_session(sid)
    median = {sid: statistics.median(values) * 1000 for sid, values in pre.items()}
    step = {sid: statistics.median(values) * 1000 for sid, values in tool.items()}
    extra = median[ten] - median[none]
    print(f"{'session':10} {'pre-tool ms':>12} {'exec true ms':>13}")
    print(f"{'none':10} {median[none]:12.2f} {step[none]:13.2f}")
    print(f"{f'{count} skills':10} {median[ten]:12.2f} {step[ten]:13.2f}")
    print(f"extra pre-tool time with {count} skills: {extra:.2f} ms (goal <= 5 ms)")
    report(
        f"Docker pre-tool step, {count} skills in place vs none (extra)",
        mango=extra,
        unit="ms",
        goal=value_at_most(5.0),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--skills", type=int, default=10)
    args = parser.parse_args()

    from mango.embedded import EmbeddedPostgres

    scratch = Path(tempfile.mkdtemp(prefix="mango-bench-skills-"))
    scratch.chmod(0o711)  # as root, the embedded PostgreSQL runs as an unprivileged account
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith("MANGO_")}
        with EmbeddedPostgres(scratch / "pgdata") as url:
            environ = {
                **base,
                "MANGO_DATABASE_URL": url,
                "MANGO_STATE_DIR": str(scratch),
                "MANGO_SANDBOX": "docker",
                "MANGO_SANDBOX_IMAGE": IMAGE,
                "MANGO_SANDBOX_PULL": "0",
                "MANGO_SANDBOX_RESOURCE_DIR": str(scratch / "docker"),
                "MANGO_FILE_STORE": "fs",
                "MANGO_FILE_STORE_DIR": str(scratch / "blobs"),
            }
            asyncio.run(_measure(environ, scratch, args.rounds, args.skills))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
