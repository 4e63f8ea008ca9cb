"""``mango worker --ui``: the embedded dev server's web UI, and a Session's workflow in it."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from mango.config import Settings
from mango.domain import ConfigurationError
from mango.embedded.temporal import EmbeddedTemporal, running_ui_url
from mango.temporal import session_workflow_id

from .support import MANGO, WorkerEnv, WorkerProcess, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.slow]


def _spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [*MANGO, "worker", "--ui", "--reconcile-interval", "0.5", "--graceful-shutdown", "2"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a 127.0.0.1 URL
        return response.status, response.headers.get("Content-Type", ""), response.read()


async def test_worker_ui_shows_the_sessions_workflow(worker_env: WorkerEnv, tmp_path: Path) -> None:
    """The worker prints the UI's URL; the UI's own API lists the Session's workflow."""
    env = worker_env.environ()
    del env["MANGO_TEMPORAL_ADDRESS"]  # the embedded dev server, as a user without Temporal runs it
    log = tmp_path / "worker.log"
    worker = WorkerProcess(_spawn(env, log), log)
    try:
        await worker.wait_ready(120)
        match = re.search(
            r"Temporal web UI: (http://127\.0\.0\.1:\d+)/namespaces/default/workflows",
            worker.text(),
        )
        assert match is not None, worker.text()
        base = match[1]
        assert running_ui_url(worker_env.state_dir) == base

        run = await asyncio.create_subprocess_exec(
            *MANGO,
            "exec",
            "--via-temporal",
            "--session",
            "ui-demo",
            "--",
            "echo",
            "seen",
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(run.communicate(), 120)
        assert (run.returncode, out) == (0, b"seen\n"), err

        status, kind, page = await asyncio.to_thread(_get, base + "/")
        assert (status, kind.split(";")[0]) == (200, "text/html")
        assert b"<html" in page.lower()
        workflow_id = session_workflow_id("ui-demo")
        query = urllib.parse.quote(f'WorkflowId="{workflow_id}"')
        url = f"{base}/api/v1/namespaces/default/workflows?query={query}"

        async def listed() -> bool:
            _, _, body = await asyncio.to_thread(_get, url)
            executions = json.loads(body).get("executions", [])
            return any(e["execution"]["workflowId"] == workflow_id for e in executions)

        await wait_until(listed, 30, "the UI to list the Session's workflow")
        _, _, body = await asyncio.to_thread(_get, url)
        [execution] = json.loads(body)["executions"]
        assert execution["type"]["name"] == "SessionWorkflow"
        assert execution["taskQueue"] == f"{worker_env.queue_prefix}-local"
    finally:
        worker.stop()
    assert worker.process.returncode == 0, worker.text()


async def test_joining_a_headless_server_with_ui_is_refused(tmp_path: Path) -> None:
    """A UI cannot be added to a running headless server; the error says what to do."""
    headless = EmbeddedTemporal(tmp_path)
    await headless.start()
    try:
        assert running_ui_url(tmp_path) is None
        with pytest.raises(ConfigurationError, match="without its web UI"):
            await EmbeddedTemporal(tmp_path, ui_port=0).start()
    finally:
        await headless.stop()


def test_ui_settings(tmp_path: Path) -> None:
    """MANGO_TEMPORAL_UI_PORT is a port or 0; a UI beside an external server is refused."""
    from mango.cli.durable import open_temporal

    base = {"MANGO_STATE_DIR": str(tmp_path)}
    assert Settings.from_env(base).temporal_ui_port is None
    assert Settings.from_env({**base, "MANGO_TEMPORAL_UI_PORT": "0"}).temporal_ui_port == 0
    with pytest.raises(ConfigurationError, match="MANGO_TEMPORAL_UI_PORT"):
        Settings.from_env({**base, "MANGO_TEMPORAL_UI_PORT": "70000"})
    external = Settings.from_env(
        {**base, "MANGO_TEMPORAL_UI_PORT": "8233", "MANGO_TEMPORAL_ADDRESS": "127.0.0.1:1"}
    )

    async def enter() -> None:
        async with open_temporal(external, start_embedded=True):
            pass

    with pytest.raises(ConfigurationError, match="embedded dev server's"):
        asyncio.run(enter())
