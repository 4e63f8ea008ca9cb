"""Settings of the local provider, read from its context's environment only when it is opened."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs

from mango.local.conformance import open_conformance_provider
from mango.local.layout import PROVIDER_NAME, SANDBOX_DIR_ENV
from mango.local.provider import CAPABILITIES, LocalProvider
from mango.provider import (
    MAX_OUTPUT_BYTES_ENV,
    MAX_OUTPUT_BYTES_SETTING,
    MAX_PROCESS_LOG_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
    ConformanceTarget,
    ProviderContext,
    ProviderRegistration,
    SettingSpec,
    SupportLevel,
    max_output_bytes,
    max_process_log_bytes,
    max_read_bytes,
    state_dir,
)
from mango.provider.hostdirs import absolute_dir_setting

__all__ = [
    "CONFORMANCE_TARGET",
    "MAX_OUTPUT_BYTES_ENV",
    "REGISTRATION",
    "SANDBOX_DIR_ENV",
    "SETTINGS",
    "STATE_DIR_ENV",
    "LocalSettings",
    "open_local_provider",
    "read_local_settings",
]

STATE_DIR_ENV = "MANGO_STATE_DIR"

SETTINGS = (
    SettingSpec(
        env=SANDBOX_DIR_ENV,
        description=(
            "absolute directory holding one sub-directory per Session "
            "(default: <state dir>/sandboxes; the state dir is $MANGO_STATE_DIR, "
            "/var/lib/mango for root, else the user state directory)"
        ),
    ),
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
    MAX_PROCESS_LOG_BYTES_SETTING,
)
"""The settings the local provider reads, as its registration declares them."""


@attrs.frozen
class LocalSettings:
    """The local provider's settings, validated."""

    sandbox_dir: Path
    max_output_bytes: int
    max_read_bytes: int
    max_process_log_bytes: int


def read_local_settings(environ: Mapping[str, str]) -> LocalSettings:
    """Read and validate the settings from ``environ`` (the provider context's).

    Raises :class:`ConfigurationError` naming the variable at fault. Empty
    values count as unset.
    """
    env = environ
    sandbox_dir_text = env.get(SANDBOX_DIR_ENV, "")
    if sandbox_dir_text:
        sandbox_dir = absolute_dir_setting(SANDBOX_DIR_ENV, sandbox_dir_text)
    else:
        sandbox_dir = state_dir(env) / "sandboxes"
    return LocalSettings(
        sandbox_dir=sandbox_dir,
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
        max_process_log_bytes=max_process_log_bytes(env),
    )


def open_local_provider(context: ProviderContext) -> LocalProvider:
    """The registration's factory: a :class:`LocalProvider` in ``context``'s namespace.

    Its settings come from ``context.environ``, never from ``os.environ``.
    """
    settings = read_local_settings(context.environ)
    return LocalProvider(
        settings.sandbox_dir,
        max_output_bytes=settings.max_output_bytes,
        max_read_bytes=settings.max_read_bytes,
        max_process_log_bytes=settings.max_process_log_bytes,
        namespace=context.namespace,
    )


REGISTRATION = ProviderRegistration(
    name=PROVIDER_NAME,
    capabilities=CAPABILITIES,
    support_level=SupportLevel.DEVELOPMENT,
    settings=SETTINGS,
    factory=open_local_provider,
    description=(
        "host processes in a per-Session directory; NOT an isolation boundary "
        "(development and tests only)"
    ),
)
"""``local``: development only, not an isolation boundary; the file API and background processes."""

CONFORMANCE_TARGET = ConformanceTarget(
    provider=PROVIDER_NAME,
    open=open_conformance_provider,
    description="local provider under the scratch directory",
)
"""The offline target: a local provider under the run's scratch directory."""
