"""``mango dev-env``: the example made from the registrations, a private file, explicit loading."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from mango.cli.devenv import dev_env_example
from mango.plugins import load_plugins

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "docs" / "dev.env.example"
BIN = Path(sys.executable).parent


def _run(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("MANGO_", "XDG_"))
    }
    env.update(HOME=str(home), MANGO_STATE_DIR=str(home / "state"))
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_the_shipped_example_is_what_the_registrations_give() -> None:
    """docs/dev.env.example cannot drift: it is the generated text, setting for setting."""
    registry = load_plugins(environ={}).providers()
    generated = dev_env_example(registry)
    assert EXAMPLE.read_text(encoding="utf-8") == generated, (
        "docs/dev.env.example is stale; regenerate it with: "
        "uv run mango dev-env example > docs/dev.env.example"
    )
    for name in registry.names():
        assert f"# ---- {name} (" in generated
        for setting in registry.get(name).settings:
            assert f"#{setting.env}=" in generated or f"# {setting.env}: read here too" in generated
            if setting.secret:
                assert f"#{setting.env}=\n" in generated  # a secret never gets a default written


def test_init_writes_a_private_file_once(tmp_path: Path) -> None:
    """0600, never replaced without --force; --force replaces it and keeps it private."""
    target = tmp_path / ".config" / "mango" / "dev.env"
    first = _run(tmp_path, str(BIN / "mango"), "dev-env", "init")
    assert first.returncode == 0, first.stderr
    assert f"wrote {target}" in first.stdout
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_text().startswith("# mango development settings")
    target.write_text("E2B_API_KEY=mine\n")
    again = _run(tmp_path, str(BIN / "mango"), "dev-env", "init")
    assert again.returncode == 2
    assert again.stderr.splitlines() == [
        f"error: {target} already exists; it was left as it is",
        "hint: add --force to replace it",
    ]
    assert target.read_text() == "E2B_API_KEY=mine\n"
    target.chmod(0o644)
    forced = _run(tmp_path, str(BIN / "mango"), "dev-env", "init", "--force")
    assert forced.returncode == 0, forced.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert "E2B_API_KEY=mine" not in target.read_text()


def test_run_loads_the_file_for_one_command_and_nothing_else_does(tmp_path: Path) -> None:
    """dev-env run and with-dev-env add the values; a plain mango command never reads them."""
    target = tmp_path / ".config" / "mango" / "dev.env"
    target.parent.mkdir(parents=True)
    target.write_text(
        "# a comment\nexport GREETING='hello there'\nMANGO_SANDBOX=no-such-provider\nEMPTY=\n"
    )
    script = 'echo "$GREETING|$MANGO_SANDBOX|${EMPTY-unset}"; exit 7'
    loaded = _run(tmp_path, str(BIN / "mango"), "dev-env", "run", "--", "sh", "-c", script)
    assert (loaded.returncode, loaded.stdout) == (7, "hello there|no-such-provider|\n")
    alias = _run(tmp_path, str(BIN / "with-dev-env"), "sh", "-c", script)
    assert (alias.returncode, alias.stdout) == (7, "hello there|no-such-provider|\n")
    # Not loaded implicitly: the file's MANGO_SANDBOX would fail every command.
    plain = _run(tmp_path, str(BIN / "mango"), "providers", "--json")
    assert plain.returncode == 0, plain.stderr
    assert '"selected": true' in plain.stdout
    missing = _run(
        tmp_path, str(BIN / "mango"), "dev-env", "run", "--file", str(tmp_path / "x"), "--", "true"
    )
    assert missing.returncode == 2
    assert "hint: create it with: mango dev-env init" in missing.stderr
    absent = _run(tmp_path, str(BIN / "mango"), "dev-env", "run", "--", "no-such-program-x")
    assert absent.returncode == 127
