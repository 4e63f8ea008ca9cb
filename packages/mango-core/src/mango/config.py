"""Process configuration read from the environment.

Credentials stay here, in process memory: nothing in this module is written to
PostgreSQL, logs, references or error messages. :func:`redact_url` removes a
password before a URL is shown anywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import attrs
import platformdirs

from mango.domain.errors import ConfigurationError, InvalidInput
from mango.domain.registry import SettingSpec, validate_namespace
from mango.domain.values import validate_provider_name

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_PROVIDER",
    "DEFAULT_TASK_QUEUE_PREFIX",
    "DEFAULT_TEMPORAL_NAMESPACE",
    "MAX_OUTPUT_BYTES_ENV",
    "MAX_OUTPUT_BYTES_SETTING",
    "NAMESPACE_ENV",
    "ROOT_STATE_DIR",
    "Settings",
    "max_output_bytes",
    "redact_url",
    "state_dir",
]

DEFAULT_PROVIDER = "local"
MAX_OUTPUT_BYTES_ENV = "MANGO_MAX_OUTPUT_BYTES"
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
"""Default per-stream cap on the output an exec keeps, shared by the providers."""
MAX_OUTPUT_BYTES_SETTING = SettingSpec(
    env=MAX_OUTPUT_BYTES_ENV,
    description="per-stream cap, in bytes, on the output an exec keeps",
    default=str(DEFAULT_MAX_OUTPUT_BYTES),
)
NAMESPACE_ENV = "MANGO_NAMESPACE"
ROOT_STATE_DIR = Path("/var/lib/mango")
"""The default state directory when running as root."""
DEFAULT_TEMPORAL_NAMESPACE = "default"
DEFAULT_TASK_QUEUE_PREFIX = "mango"
_TASK_QUEUE_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """mango's state directory.

    ``MANGO_STATE_DIR`` (absolute; ``~`` is expanded) if set. Otherwise
    ``/var/lib/mango`` for root, because the embedded PostgreSQL runs as an
    unprivileged account that cannot enter ``/root``; else the platform's user
    state directory (``~/.local/state/mango`` on Linux).
    """
    env = os.environ if env is None else env
    configured = env.get("MANGO_STATE_DIR", "").strip()
    if configured:
        path = Path(configured).expanduser()
        if not path.is_absolute():
            raise ConfigurationError(
                f"MANGO_STATE_DIR must be an absolute path, got {configured!r}"
            )
        return path
    if os.name == "posix" and os.geteuid() == 0:
        return ROOT_STATE_DIR
    return platformdirs.user_state_path("mango", appauthor=False)


def max_output_bytes(env: Mapping[str, str] | None = None) -> int:
    """The per-stream output cap from ``MANGO_MAX_OUTPUT_BYTES`` (a positive integer)."""
    env = os.environ if env is None else env
    text = env.get(MAX_OUTPUT_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_OUTPUT_BYTES
    try:
        value = int(text, 10)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(f"{MAX_OUTPUT_BYTES_ENV} must be a positive integer, got {text!r}")
    return value


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
    temporal_address: str | None = None
    """``MANGO_TEMPORAL_ADDRESS`` (host:port); None means the embedded dev server."""
    temporal_namespace: str = DEFAULT_TEMPORAL_NAMESPACE
    task_queue_prefix: str = DEFAULT_TASK_QUEUE_PREFIX
    """Workers of provider P poll ``<prefix>-P`` (``MANGO_TEMPORAL_TASK_QUEUE_PREFIX``)."""
    namespace: str | None = None
    """``MANGO_NAMESPACE``: the deployment namespace; None means the store's own."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate settings; raise :class:`ConfigurationError` naming the variable."""
        env = os.environ if env is None else env
        sandbox = env.get("MANGO_SANDBOX", "").strip() or DEFAULT_PROVIDER
        try:
            validate_provider_name(sandbox)
        except InvalidInput as exc:
            raise ConfigurationError(f"MANGO_SANDBOX: {exc}") from None
        url = env.get("MANGO_DATABASE_URL", "").strip() or None
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ConfigurationError(
                f"MANGO_DATABASE_URL must be a postgresql:// URL, got {redact_url(url)!r}"
            )
        address = env.get("MANGO_TEMPORAL_ADDRESS", "").strip() or None
        if address is not None and (":" not in address or "://" in address):
            raise ConfigurationError(f"MANGO_TEMPORAL_ADDRESS must be host:port, got {address!r}")
        prefix = (
            env.get("MANGO_TEMPORAL_TASK_QUEUE_PREFIX", "").strip() or DEFAULT_TASK_QUEUE_PREFIX
        )
        if not _TASK_QUEUE_PREFIX.match(prefix):
            raise ConfigurationError(
                "MANGO_TEMPORAL_TASK_QUEUE_PREFIX must be 1-100 letters, digits, '.', '_' "
                f"or '-', got {prefix!r}"
            )
        namespace = env.get(NAMESPACE_ENV, "").strip() or None
        if namespace is not None:
            try:
                validate_namespace(namespace)
            except InvalidInput as exc:
                raise ConfigurationError(f"{NAMESPACE_ENV}: {exc}") from None
        return cls(
            state_dir=state_dir(env),
            namespace=namespace,
            sandbox=sandbox,
            database_url=url,
            exec_timeout=_positive_float(env, "MANGO_EXEC_TIMEOUT"),
            temporal_address=address,
            temporal_namespace=env.get("MANGO_TEMPORAL_NAMESPACE", "").strip()
            or DEFAULT_TEMPORAL_NAMESPACE,
            task_queue_prefix=prefix,
        )

    @property
    def database_display(self) -> str:
        """Where the database is, safe to print."""
        if self.database_url is None:
            return f"embedded PostgreSQL under {self.state_dir / 'postgres'}"
        return redact_url(self.database_url)

    @property
    def temporal_display(self) -> str:
        """Where Temporal is, safe to print."""
        if self.temporal_address is None:
            return f"embedded dev server under {self.state_dir / 'temporal'}"
        return f"{self.temporal_address} (namespace {self.temporal_namespace})"
