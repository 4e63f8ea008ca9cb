"""An application embedding mango chooses each manager's settings, the provider's included."""

from __future__ import annotations

from pathlib import Path

import pytest

import mango
from mango.config import Settings

pytestmark = pytest.mark.postgres

POISONED = {
    "MANGO_SANDBOX": "no-such-provider",
    "MANGO_DATABASE_URL": "not-a-database-url",
    "MANGO_STATE_DIR": "relative/state",
    "MANGO_LOCAL_SANDBOX_DIR": "relative/sandboxes",
    "MANGO_MAX_OUTPUT_BYTES": "lots",
    "MANGO_MAX_READ_BYTES": "lots",
}
"""Process settings that fail the moment anything reads them (relative directories, text)."""


def _environ(database_url: str, home: Path, cap: int) -> dict[str, str]:
    return {
        "MANGO_SANDBOX": "local",
        "MANGO_DATABASE_URL": database_url,
        "MANGO_STATE_DIR": str(home / "state"),
        "MANGO_LOCAL_SANDBOX_DIR": str(home / "sandboxes"),
        "MANGO_MAX_OUTPUT_BYTES": str(cap),
        "MANGO_DISABLE_PLUGINS": "1",
    }


async def test_two_managers_get_providers_configured_by_their_own_environ(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """environ= and Settings.from_env(mapping) reach the provider; os.environ is never read."""
    for name, value in POISONED.items():
        monkeypatch.setenv(name, value)
    first, second = tmp_path / "first", tmp_path / "second"
    async with (
        mango.open_session_manager(environ=_environ(database_url, first, 100)) as one,
        mango.open_session_manager(Settings.from_env(_environ(database_url, second, 300))) as two,
    ):
        for manager, home, cap in ((one, first, 100), (two, second, 300)):
            session_id = f"embedded-{home.name}"
            await manager.ensure_session(session_id)
            sandbox = await manager.acquire(session_id, mango.SandboxSpec(timeout=30))
            flood = await sandbox.exec(mango.Command(("head", "-c", "1000", "/dev/zero")))
            assert (len(flood.stdout), flood.stdout_truncated) == (cap, True)
            assert Path(sandbox.root).is_relative_to(home / "sandboxes")
            await manager.delete_session(session_id)


def test_settings_keep_a_private_copy_of_their_environment_and_never_show_it() -> None:
    """The provider reads what the caller gave when the settings were made, and repr hides it."""
    given = {"MANGO_STATE_DIR": "/tmp/mango-embedding", "E2B_API_KEY": "e2b-secret-value"}
    settings = Settings.from_env(given)
    given["E2B_API_KEY"] = "changed later"
    assert settings.environ["E2B_API_KEY"] == "e2b-secret-value"
    assert "e2b-secret-value" not in repr(settings)
    with pytest.raises(TypeError):
        settings.environ["MANGO_SANDBOX"] = "docker"  # type: ignore[index]
