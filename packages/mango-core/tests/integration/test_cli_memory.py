"""``mango memory`` and ``mango sessions create --memory`` end to end on the local provider.

The stores need only the database; attaching one needs ``memory-stores``,
which local does not declare, so it is refused at admission (exit 2, nothing
written). Real processes on the test's PostgreSQL database. Cost: thirteen
CLI processes (about a second each unloaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

MANGO = str(Path(sys.executable).with_name("mango"))


def test_memory_commands_and_the_refused_attachment(database_url: str, tmp_path: Path) -> None:
    """create, write (stdin and --from), read, versions, ls, archive; local refuses --memory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "DOCKER_"))}
    env.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_DISABLE_PLUGINS="1",
        MANGO_SANDBOX="local",
    )

    def mango(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [MANGO, *args], input=stdin, capture_output=True, env=env, timeout=120, check=False
        )

    created = mango("memory", "create", "Notes: 2026")
    assert created.returncode == 0, created.stderr
    store = created.stdout.decode().strip()
    assert store.startswith("memstore-")
    assert mango("memory", "write", store, "/a.md", stdin=b"one\n").returncode == 0
    source = tmp_path / "two.md"
    source.write_bytes(b"one\ntwo\n")
    assert mango("memory", "write", store, "/a.md", "--from", str(source)).returncode == 0
    assert mango("memory", "read", store, "/a.md").stdout == b"one\ntwo\n"
    versions = json.loads(mango("memory", "versions", store, "/a.md", "--json").stdout)
    assert [(v["operation"], v["actor_type"], v["size"]) for v in versions] == [
        ("created", "api_actor", 4),
        ("modified", "api_actor", 8),
    ]
    listed = json.loads(mango("memory", "ls", "--json").stdout)
    assert [(s["id"], s["mount_path"], s["archived_at"]) for s in listed] == [
        (store, "/mnt/memory/notes-2026", None)
    ]
    bad = mango("memory", "write", store, "relative.md", stdin=b"x")
    assert bad.returncode != 0
    assert b"relative.md" in bad.stderr
    refused = mango("sessions", "create", "s1", "--memory", store)
    assert refused.returncode == 2, refused.stderr
    assert b"memory store mounts" in refused.stderr
    assert b"s1" not in mango("sessions", "list").stdout
    assert mango("memory", "archive", store).stdout.decode() == f"{store}: archived\n"
    archived = mango("memory", "write", store, "/a.md", stdin=b"later")
    assert archived.returncode != 0
    assert b"archived" in archived.stderr
