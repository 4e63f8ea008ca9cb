"""Process configuration read from the environment.

Credentials stay here, in process memory: nothing in this module is written to
PostgreSQL, logs, references or error messages. :func:`redact_url` removes a
password before a URL is shown anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import attrs
import platformdirs

from mango.domain.errors import ConfigurationError
from mango.domain.values import validate_provider_name

__all__ = [
    "DEFAULT_PROVIDER",
    "Settings",
    "redact_url",
    "state_dir",
]

DEFAULT_PROVIDER = "local"


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """mango's state directory: ``MANGO_STATE_DIR`` or the platform's user state dir."""
    env = os.environ if env is None else env
    configured = env.get("MANGO_STATE_DIR", "").strip()
    if configured:
        return Path(configured).expanduser()
    return platformdirs.user_state_path("mango", appauthor=False)


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _positive_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {raw!r}")
    return value


@attrs.frozen
class Settings:
    """Everything the composition roots (CLI, worker) need from the environment."""

    state_dir: Path
    sandbox: str = DEFAULT_PROVIDER
    database_url: str | None = attrs.field(default=None, repr=False)
    exec_timeout: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate settings; raise :class:`ConfigurationError` naming the variable."""
        env = os.environ if env is None else env
        sandbox = env.get("MANGO_SANDBOX", "").strip() or DEFAULT_PROVIDER
        try:
            validate_provider_name(sandbox)
        except Exception as exc:
            raise ConfigurationError(f"MANGO_SANDBOX: {exc}") from None
        url = env.get("MANGO_DATABASE_URL", "").strip() or None
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ConfigurationError(
                f"MANGO_DATABASE_URL must be a postgresql:// URL, got {redact_url(url)!r}"
            )
        return cls(
            state_dir=state_dir(env),
            sandbox=sandbox,
            database_url=url,
            exec_timeout=_positive_float(env, "MANGO_EXEC_TIMEOUT"),
        )

    @property
    def database_display(self) -> str:
        """Where the database is, safe to print."""
        if self.database_url is None:
            return f"embedded PostgreSQL under {self.state_dir / 'postgres'}"
        return redact_url(self.database_url)
