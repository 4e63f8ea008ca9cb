"""Process configuration read from the environment.

Credentials stay here, in process memory: nothing in this module is written to
PostgreSQL, logs, references or error messages. :func:`mango.runtime.database_display`
shows a database URL with every secret masked.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import attrs

from mango.domain.errors import ConfigurationError, InvalidInput
from mango.domain.fleet import FleetPolicy, fleet_policy
from mango.domain.limits import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_PROCESS_LOG_BYTES,
    DEFAULT_MAX_READ_BYTES,
    MAX_OUTPUT_BYTES_LIMIT,
    MAX_PROCESS_LOG_BYTES_LIMIT,
    MAX_READ_BYTES_LIMIT,
)
from mango.domain.registry import SettingSpec, validate_namespace
from mango.domain.validators import MAX_SETTING_SECONDS, number_setting
from mango.domain.values import validate_host, validate_provider_name

if TYPE_CHECKING:
    from mango.app.profiles import Profiles

__all__ = [
    "DEFAULT_EMBEDDED_IDLE_SECONDS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_PROVIDER",
    "DEFAULT_TASK_QUEUE_PREFIX",
    "DEFAULT_TEMPORAL_NAMESPACE",
    "EMBEDDED_IDLE_ENV",
    "EXEC_TIMEOUT_LIMIT",
    "MAX_OUTPUT_BYTES_ENV",
    "MAX_OUTPUT_BYTES_LIMIT",
    "MAX_OUTPUT_BYTES_SETTING",
    "MAX_PROCESS_LOG_BYTES_ENV",
    "MAX_PROCESS_LOG_BYTES_SETTING",
    "MAX_READ_BYTES_ENV",
    "MAX_READ_BYTES_LIMIT",
    "MAX_READ_BYTES_SETTING",
    "MAX_WAIT_ENV",
    "NAMESPACE_ENV",
    "PACKAGE_MANAGER_HOSTS_ENV",
    "PAYLOAD_KEYS_ENV",
    "PROFILES_FILE_ENV",
    "ROOT_STATE_DIR",
    "PayloadKey",
    "Settings",
    "max_output_bytes",
    "max_process_log_bytes",
    "max_read_bytes",
    "number_setting",
    "package_manager_hosts",
    "payload_keys",
    "state_dir",
]

DEFAULT_PROVIDER = "local"
MAX_OUTPUT_BYTES_ENV = "MANGO_MAX_OUTPUT_BYTES"
MAX_OUTPUT_BYTES_SETTING = SettingSpec(
    env=MAX_OUTPUT_BYTES_ENV,
    description="per-stream cap, in bytes, on the output an exec keeps",
    default=str(DEFAULT_MAX_OUTPUT_BYTES),
)
MAX_READ_BYTES_ENV = "MANGO_MAX_READ_BYTES"
MAX_READ_BYTES_SETTING = SettingSpec(
    env=MAX_READ_BYTES_ENV,
    description=(
        "largest file, in bytes, a buffered read returns (larger files fail with FileTooLarge; "
        "'mango files read' streams them)"
    ),
    default=str(DEFAULT_MAX_READ_BYTES),
)
MAX_PROCESS_LOG_BYTES_ENV = "MANGO_MAX_PROCESS_LOG_BYTES"
MAX_PROCESS_LOG_BYTES_SETTING = SettingSpec(
    env=MAX_PROCESS_LOG_BYTES_ENV,
    description=(
        "cap, in bytes, on the output log a background process keeps (the oldest bytes "
        "are dropped first, and counted)"
    ),
    default=str(DEFAULT_MAX_PROCESS_LOG_BYTES),
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
    # Imported here: only a non-root process without MANGO_STATE_DIR needs it, and
    # every provider plugin imports this module through the provider surface.
    import platformdirs

    return platformdirs.user_state_path("mango", appauthor=False)


EXEC_TIMEOUT_LIMIT = MAX_SETTING_SECONDS
"""Upper bound of ``MANGO_EXEC_TIMEOUT`` (a week); unset means no bound at all."""
MAX_WAIT_ENV = "MANGO_TEMPORAL_MAX_WAIT"
DEFAULT_MAX_WAIT = 120.0
"""How long a durable step waits while the provider is unavailable before giving up."""
EMBEDDED_IDLE_ENV = "MANGO_EMBEDDED_IDLE_SECONDS"
DEFAULT_EMBEDDED_IDLE_SECONDS = 300.0
"""How long the command line leaves an unused embedded PostgreSQL running (five minutes)."""
OUTPUTS_QUIET_ENV = "MANGO_OUTPUTS_QUIET_SECONDS"
DEFAULT_OUTPUTS_QUIET_SECONDS = 10.0
"""How long a Session is quiet after a step before its workflow publishes its outputs."""


def max_output_bytes(env: Mapping[str, str] | None = None) -> int:
    """The per-stream output cap from ``MANGO_MAX_OUTPUT_BYTES`` (1 byte to 256 MiB)."""
    env = os.environ if env is None else env
    value = number_setting(
        env,
        MAX_OUTPUT_BYTES_ENV,
        minimum=1,
        maximum=MAX_OUTPUT_BYTES_LIMIT,
        integer=True,
        unit="bytes",
    )
    return DEFAULT_MAX_OUTPUT_BYTES if value is None else int(value)


def max_process_log_bytes(env: Mapping[str, str] | None = None) -> int:
    """The background-process log cap from ``MANGO_MAX_PROCESS_LOG_BYTES`` (1 B to 64 GiB)."""
    env = os.environ if env is None else env
    value = number_setting(
        env,
        MAX_PROCESS_LOG_BYTES_ENV,
        minimum=1,
        maximum=MAX_PROCESS_LOG_BYTES_LIMIT,
        integer=True,
        unit="bytes",
    )
    return DEFAULT_MAX_PROCESS_LOG_BYTES if value is None else int(value)


PACKAGE_MANAGER_HOSTS_ENV = "MANGO_PACKAGE_MANAGER_HOSTS"


def package_manager_hosts(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The hosts package managers need, from ``MANGO_PACKAGE_MANAGER_HOSTS``.

    A comma- or whitespace-separated list of host names, ``*.`` wildcards or
    IPv4 addresses (the allowlist rule of
    :func:`~mango.domain.values.validate_host`), lower-cased, de-duplicated
    and sorted. A limited-network sandbox may reach them only while its
    packages are installed. They are deployment configuration: which
    registries (or mirrors) a deployment uses is its own business, so mango
    ships no list. Empty when unset.
    """
    env = os.environ if env is None else env
    items = env.get(PACKAGE_MANAGER_HOSTS_ENV, "").replace(",", " ").split()
    hosts: set[str] = set()
    for item in items:
        try:
            hosts.add(validate_host(item).lower())
        except InvalidInput as exc:
            raise ConfigurationError(f"{PACKAGE_MANAGER_HOSTS_ENV}: {exc}") from None
    return tuple(sorted(hosts))


def max_read_bytes(env: Mapping[str, str] | None = None) -> int:
    """The bound of a buffered read from ``MANGO_MAX_READ_BYTES`` (1 byte to 1 GiB)."""
    env = os.environ if env is None else env
    value = number_setting(
        env,
        MAX_READ_BYTES_ENV,
        minimum=1,
        maximum=MAX_READ_BYTES_LIMIT,
        integer=True,
        unit="bytes",
    )
    return DEFAULT_MAX_READ_BYTES if value is None else int(value)


PAYLOAD_KEYS_ENV = "MANGO_TEMPORAL_PAYLOAD_KEYS"
PROFILES_FILE_ENV = "MANGO_PROFILES_FILE"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")


@attrs.frozen
class PayloadKey:
    """One key of the Temporal payload codec: an id (stored with payloads) and 32 secret bytes."""

    key_id: str
    secret: bytes = attrs.field(repr=False)


def payload_keys(env: Mapping[str, str] | None = None) -> tuple[PayloadKey, ...]:
    """Parse ``MANGO_TEMPORAL_PAYLOAD_KEYS`` (``id:base64key,...``; the first encrypts).

    Errors name the variable and the key id, never key material.
    """
    env = os.environ if env is None else env
    text = env.get(PAYLOAD_KEYS_ENV, "").strip()
    if not text:
        return ()
    keys: list[PayloadKey] = []
    for position, item in enumerate(text.split(","), start=1):
        key_id, sep, encoded = item.strip().partition(":")
        if not sep or not _KEY_ID.match(key_id):
            raise ConfigurationError(
                f"{PAYLOAD_KEYS_ENV}: entry {position} must be 'id:base64key' with an id of "
                "1-64 letters, digits, '.', '_' or '-'"
            )
        # Standard or URL-safe alphabet, padding optional.
        text_key = encoded.strip().replace("-", "+").replace("_", "/")
        try:
            secret = base64.b64decode(text_key + "=" * (-len(text_key) % 4), validate=True)
        except (binascii.Error, ValueError):
            secret = b""
        if len(secret) != 32:
            raise ConfigurationError(
                f"{PAYLOAD_KEYS_ENV}: key {key_id!r} must be 32 bytes, base64-encoded",
                hint='make one with: python -c "import base64, os; '
                'print(base64.b64encode(os.urandom(32)).decode())"',
            )
        if any(key.key_id == key_id for key in keys):
            raise ConfigurationError(f"{PAYLOAD_KEYS_ENV}: key id {key_id!r} is listed twice")
        keys.append(PayloadKey(key_id, secret))
    return tuple(keys)


def _snapshot(environ: Mapping[str, str]) -> Mapping[str, str]:
    """A read-only copy: later changes to the caller's mapping do not reach the settings."""
    return MappingProxyType(dict(environ))


def _process_environ() -> Mapping[str, str]:
    return _snapshot(os.environ)


@attrs.frozen
class Settings:
    """Everything the composition roots (CLI, worker) need from the environment.

    ``environ`` is the environment the settings come from; the selected
    provider reads its own settings (``E2B_API_KEY``, ``MANGO_SANDBOX_IMAGE``,
    ...) from it too, through ``ProviderContext.environ``, never from
    ``os.environ`` behind the caller's back.
    """

    state_dir: Path
    sandbox: str = DEFAULT_PROVIDER
    database_url: str | None = attrs.field(default=None, repr=False)
    exec_timeout: float | None = None
    temporal_address: str | None = None
    """``MANGO_TEMPORAL_ADDRESS`` (host:port); None means the embedded dev server."""
    temporal_namespace: str = DEFAULT_TEMPORAL_NAMESPACE
    task_queue_prefix: str = DEFAULT_TASK_QUEUE_PREFIX
    """Workers of provider P poll ``<prefix>-P`` (``MANGO_TEMPORAL_TASK_QUEUE_PREFIX``)."""
    temporal_payload_keys: tuple[PayloadKey, ...] = attrs.field(default=(), repr=False)
    """``MANGO_TEMPORAL_PAYLOAD_KEYS``: when set, Temporal payloads are encrypted."""
    namespace: str | None = None
    """``MANGO_NAMESPACE``: the deployment namespace; None means the store's own."""
    package_manager_hosts: tuple[str, ...] = ()
    """``MANGO_PACKAGE_MANAGER_HOSTS``: reachable by limited-network sandboxes during setup."""
    temporal_max_wait: float = DEFAULT_MAX_WAIT
    """``MANGO_TEMPORAL_MAX_WAIT``: seconds a ``--via-temporal`` step waits through failed
    attempts (the provider unavailable) before the client cancels it and gives up."""
    metrics_port: int | None = None
    """``MANGO_METRICS_PORT``: the worker serves Prometheus metrics there (None: off)."""
    metrics_host: str = "127.0.0.1"
    """``MANGO_METRICS_HOST``: the address the metrics endpoint binds."""
    telemetry_session_ids: bool = False
    """``MANGO_TELEMETRY_SESSION_IDS=1``: spans carry raw Session ids beside their hashes."""
    temporal_ui_port: int | None = None
    """``MANGO_TEMPORAL_UI_PORT``: the embedded dev server's web UI port (0: any free one;
    None: headless). ``mango worker --ui [PORT]`` overrides it."""
    embedded_idle_seconds: float = DEFAULT_EMBEDDED_IDLE_SECONDS
    """``MANGO_EMBEDDED_IDLE_SECONDS``: how long commands leave an unused embedded
    PostgreSQL running for the next one (0: stop it when the command ends)."""
    profiles_file: Path | None = None
    """``MANGO_PROFILES_FILE``: the TOML file of environment profiles (see
    :mod:`mango.app.profiles`); None means the built-in profiles only."""
    fleet: FleetPolicy = attrs.field(factory=FleetPolicy)
    """The sandbox limit, periodic orphan sweep and idle eviction (``MANGO_MAX_SANDBOXES``,
    ``MANGO_GC_INTERVAL``, ``MANGO_GC_OLDER_THAN``, ``MANGO_EVICT_IDLE_AFTER``)."""
    outputs_quiet_period: float | None = DEFAULT_OUTPUTS_QUIET_SECONDS
    """``MANGO_OUTPUTS_QUIET_SECONDS``: seconds a Session is quiet after a step before the
    workflows this process starts publish its outputs (on a provider that publishes them);
    None (the setting ``0``): only on demand."""
    environ: Mapping[str, str] = attrs.field(
        factory=_process_environ, converter=_snapshot, repr=False, hash=False
    )
    """The environment read, as a read-only copy (default: ``os.environ`` when the settings
    are made); the provider's settings are read from it. Never shown: it holds credentials."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate settings from ``env`` (default: ``os.environ``).

        Raises :class:`ConfigurationError` naming the variable. ``env`` is kept
        (a copy) as :attr:`environ`, for the provider's own settings.
        """
        env = os.environ if env is None else env
        sandbox = env.get("MANGO_SANDBOX", "").strip() or DEFAULT_PROVIDER
        try:
            validate_provider_name(sandbox)
        except InvalidInput as exc:
            raise ConfigurationError(f"MANGO_SANDBOX: {exc}") from None
        url = env.get("MANGO_DATABASE_URL", "").strip() or None
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ConfigurationError(
                # The value is not echoed: it may carry a password in any libpq form.
                "MANGO_DATABASE_URL must be a postgresql:// URL"
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
        idle = number_setting(
            env, EMBEDDED_IDLE_ENV, minimum=0, maximum=EXEC_TIMEOUT_LIMIT, unit="seconds"
        )
        max_wait = number_setting(
            env, MAX_WAIT_ENV, minimum=0.001, maximum=EXEC_TIMEOUT_LIMIT, unit="seconds"
        )
        quiet = number_setting(
            env, OUTPUTS_QUIET_ENV, minimum=0, maximum=EXEC_TIMEOUT_LIMIT, unit="seconds"
        )
        ui_port = number_setting(
            env, "MANGO_TEMPORAL_UI_PORT", minimum=0, maximum=65535, integer=True, unit=""
        )
        metrics_port = number_setting(
            env, "MANGO_METRICS_PORT", minimum=1, maximum=65535, integer=True, unit=""
        )
        session_ids = env.get("MANGO_TELEMETRY_SESSION_IDS", "").strip()
        if session_ids not in ("", "0", "1"):
            raise ConfigurationError(
                f"MANGO_TELEMETRY_SESSION_IDS must be 0 or 1, got {session_ids[:20]!r}"
            )
        profiles_text = env.get(PROFILES_FILE_ENV, "").strip()
        profiles_file = Path(profiles_text).expanduser() if profiles_text else None
        if profiles_file is not None and not profiles_file.is_absolute():
            raise ConfigurationError(
                f"{PROFILES_FILE_ENV} must be an absolute path, got {profiles_text!r}"
            )
        return cls(
            state_dir=state_dir(env),
            metrics_port=None if metrics_port is None else int(metrics_port),
            metrics_host=env.get("MANGO_METRICS_HOST", "").strip() or "127.0.0.1",
            telemetry_session_ids=session_ids == "1",
            temporal_ui_port=None if ui_port is None else int(ui_port),
            profiles_file=profiles_file,
            outputs_quiet_period=(
                DEFAULT_OUTPUTS_QUIET_SECONDS if quiet is None else quiet or None
            ),
            temporal_max_wait=DEFAULT_MAX_WAIT if max_wait is None else max_wait,
            embedded_idle_seconds=DEFAULT_EMBEDDED_IDLE_SECONDS if idle is None else idle,
            namespace=namespace,
            sandbox=sandbox,
            database_url=url,
            exec_timeout=number_setting(
                env, "MANGO_EXEC_TIMEOUT", minimum=0.001, maximum=EXEC_TIMEOUT_LIMIT, unit="seconds"
            ),
            temporal_address=address,
            temporal_namespace=env.get("MANGO_TEMPORAL_NAMESPACE", "").strip()
            or DEFAULT_TEMPORAL_NAMESPACE,
            task_queue_prefix=prefix,
            temporal_payload_keys=payload_keys(env),
            package_manager_hosts=package_manager_hosts(env),
            fleet=fleet_policy(env),
            environ=env,
        )

    def profiles(self) -> Profiles:
        """The environment profiles: the built-in ones and ``MANGO_PROFILES_FILE``'s (read now)."""
        # Imported here: every provider plugin imports this module, and needs no profiles.
        from mango.app.profiles import load_profiles

        return load_profiles(self.profiles_file)

    @property
    def temporal_display(self) -> str:
        """Where Temporal is, safe to print."""
        if self.temporal_address is None:
            return f"embedded dev server under {self.state_dir / 'temporal'}"
        return f"{self.temporal_address} (namespace {self.temporal_namespace})"
