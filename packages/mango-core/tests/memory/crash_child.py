"""A worker that dies by SIGKILL inside a Session's tool step (run by test_memory_crashes).

``python crash_child.py URL RESOURCE_DIR NAMESPACE LABELS_JSON SESSION SCRIPT WHEN``:
acquire the Session's Docker sandbox, run SCRIPT as one tool step and kill
this process with SIGKILL at WHEN: ``after-tool`` (the tool finished, its
writeback not begun) or ``in-transaction`` (the writeback's versions are
inserted, its transaction not committed).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from mango.app import SessionManager
from mango.domain import Command, SandboxSpec
from mango.postgres import PostgresMemoryRepository, open_store
from mango.postgres.memories import observe_syncs
from mango_provider_docker import DockerProvider

SPEC = SandboxSpec(timeout=60.0)


def die(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main(argv: list[str]) -> None:
    url, resource_dir, namespace, labels, session_id, script, when = argv
    async with await open_store(url) as store:
        provider = DockerProvider(
            Path(resource_dir),
            namespace=namespace,
            image="mango-test-busybox:latest",
            host=os.environ.get("DOCKER_HOST", "").strip() or None,
            pull_missing_images=False,
            extra_labels=json.loads(labels),
        )
        manager = SessionManager(provider, store, memory=PostgresMemoryRepository(store.pool))
        sandbox = await manager.acquire(session_id, SPEC)
        if when == "in-transaction":
            observe_syncs(die)
        async with manager.tool_step(session_id, SPEC):
            result = await sandbox.exec(Command(("sh", "-c", script)))
            assert result.exit_code == 0, result
            if when == "after-tool":
                die()
    sys.exit("the child was meant to die")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
