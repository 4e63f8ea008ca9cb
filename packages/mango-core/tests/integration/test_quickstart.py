"""The README's Python quickstart, run as a user would run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

README = Path(__file__).resolve().parents[4] / "README.md"


def _quickstart() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "README has no python block under 'Use it from Python'"
    return match.group(1)


def test_readme_quickstart_runs(database_url: str, tmp_path: Path) -> None:
    """The quickstart provisions, writes, execs and deletes through the public API."""
    script = tmp_path / "quickstart.py"
    script.write_text(_quickstart(), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("MANGO_")}
    env.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_DISABLE_PLUGINS="1",
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"hello from mango\n", b"")
    sandboxes = tmp_path / "state" / "sandboxes"
    leftovers = [
        path
        for path in (sandboxes.rglob("*") if sandboxes.exists() else [])
        if not (path.name in (".owners", ".runs") and not any(path.iterdir()))
    ]
    assert leftovers == [], "delete_session must remove the Session's sandbox and records"


def test_public_names_are_lazy_and_listed() -> None:
    """``import mango`` loads no adapter; every name in ``__all__`` resolves."""
    code = (
        "import sys, mango\n"
        "heavy = [m for m in ('psycopg', 'temporalio', 'click', 'mango.runtime') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert all(getattr(mango, name) is not None for name in mango.__all__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
