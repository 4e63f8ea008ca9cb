"""Settings of the ``e2b`` provider, read from its context's environment only when it is opened.

A light module: the plugin's entry point loads it on every mango command,
whichever provider is selected, so the protocol client (httpx, stamina) is
imported only by the factory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mango.provider import (
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
    Capability,
    CapabilitySet,
    ConfigurationError,
    ConformanceTarget,
    ConformanceTestbed,
    ProviderContext,
    ProviderRegistration,
    SettingSpec,
    SupportLevel,
    TargetCost,
    max_output_bytes,
)
from mango_provider_e2b.options import (
    EnvdOptions,
    api_url_setting,
    max_read_bytes,
    parse_duration,
)

if TYPE_CHECKING:
    from mango_provider_e2b.provider import E2BProvider

__all__ = [
    "API_KEY_ENV",
    "API_URL_ENV",
    "AUTO_PAUSE_MODES",
    "AUTO_PAUSE_MODE_ENV",
    "CONFORMANCE_TARGET",
    "DEFAULT_API_URL",
    "DEFAULT_DOMAIN",
    "DEFAULT_TEMPLATE",
    "DOMAIN_ENV",
    "IDLE_TIMEOUT_ENV",
    "REGISTRATION",
    "SANDBOX_URL_ENV",
    "SETTINGS",
    "TEMPLATE_ENV",
    "open_e2b_conformance_target",
    "open_e2b_provider",
    "read_e2b_options",
]

API_KEY_ENV = "E2B_API_KEY"
API_URL_ENV = "E2B_API_URL"
TEMPLATE_ENV = "E2B_TEMPLATE_ID"
DOMAIN_ENV = "E2B_DOMAIN"
IDLE_TIMEOUT_ENV = "E2B_IDLE_TIMEOUT"
AUTO_PAUSE_MODE_ENV = "E2B_AUTO_PAUSE_MODE"
AUTO_PAUSE_MODES = ("full", "filesystem")
SANDBOX_URL_ENV = "E2B_SANDBOX_URL"
DEFAULT_API_URL = "https://api.e2b.app"
DEFAULT_TEMPLATE = "base"
DEFAULT_DOMAIN = "e2b.app"

SETTINGS = (
    SettingSpec(
        env=API_KEY_ENV, description="E2B API key (sent as X-API-Key)", secret=True, required=True
    ),
    SettingSpec(env=API_URL_ENV, description="control-plane URL", default=DEFAULT_API_URL),
    SettingSpec(
        env=TEMPLATE_ENV,
        description="template of sandboxes whose spec names no image (needs bash)",
        default=DEFAULT_TEMPLATE,
    ),
    SettingSpec(
        env=DOMAIN_ENV,
        description="sandbox domain: envd is https://49983-<id>.<domain>",
        default=DEFAULT_DOMAIN,
    ),
    SettingSpec(
        env=IDLE_TIMEOUT_ENV,
        description="idle time after which a sandbox pauses (300, 90s, 5m, 1h)",
        default="5m",
    ),
    SettingSpec(
        env=AUTO_PAUSE_MODE_ENV,
        description="what an idle sandbox's pause keeps: full (memory and disk) or "
        "filesystem (disk only; resuming cold-boots it)",
        default="full",
    ),
    SettingSpec(
        env=SANDBOX_URL_ENV,
        description="one URL for every sandbox's envd, routed by the E2b-Sandbox-Id header "
        "(self-hosted proxies and the offline fake; default: per-sandbox hosts)",
    ),
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
)
"""The settings the ``e2b`` provider reads, as its registration declares them."""


def read_e2b_options(environ: Mapping[str, str]) -> EnvdOptions:
    """Read and validate the E2B settings from ``environ`` (the provider context's).

    :class:`ConfigurationError` names the variable at fault. The API key is
    required and never echoed. Empty values count as unset.
    """
    from mango_provider_e2b.control import E2B

    env = environ
    api_key = env.get(API_KEY_ENV, "").strip()
    if not api_key:
        raise ConfigurationError(
            f"{API_KEY_ENV} is not set: the e2b provider needs an API key",
            hint="create one in the E2B dashboard and export it; it is never printed",
        )
    sandbox_url = env.get(SANDBOX_URL_ENV, "").strip()
    mode = env.get(AUTO_PAUSE_MODE_ENV, "").strip().lower() or "full"
    if mode not in AUTO_PAUSE_MODES:
        raise ConfigurationError(
            f"{AUTO_PAUSE_MODE_ENV} must be full or filesystem, got {mode!r}",
            hint="full keeps memory and disk across a pause; filesystem keeps the disk only",
        )
    return EnvdOptions(
        dialect=E2B,
        api_url=api_url_setting(API_URL_ENV, env.get(API_URL_ENV, "") or DEFAULT_API_URL),
        api_key=api_key,
        template=env.get(TEMPLATE_ENV, "").strip() or DEFAULT_TEMPLATE,
        domain=env.get(DOMAIN_ENV, "").strip() or DEFAULT_DOMAIN,
        envd_scheme="https",
        shared_envd_url=api_url_setting(SANDBOX_URL_ENV, sandbox_url) if sandbox_url else None,
        idle_timeout=parse_duration(IDLE_TIMEOUT_ENV, env.get(IDLE_TIMEOUT_ENV, "") or "5m"),
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
        pause_memory=mode == "full",
    )


def open_e2b_provider(context: ProviderContext) -> E2BProvider:
    """The registration's factory: validates the settings now, contacts E2B on first use.

    The settings come from ``context.environ``, never from ``os.environ``.
    """
    from mango_provider_e2b.provider import E2BProvider

    return E2BProvider(read_e2b_options(context.environ), namespace=context.namespace)


def open_e2b_conformance_target(
    scratch_dir: Path,
) -> contextlib.AbstractAsyncContextManager[E2BProvider]:
    """A fresh provider over the fake E2B service of ``scratch_dir`` (imported only when used)."""
    from mango_provider_e2b.conformance import open_e2b_conformance_provider

    return open_e2b_conformance_provider(scratch_dir)


def open_e2b_conformance_testbed(
    scratch_dir: Path,
) -> contextlib.AbstractAsyncContextManager[ConformanceTestbed]:
    """A free host port for the ``exposed-ports`` check (imported only when used)."""
    from mango_provider_e2b.conformance import open_e2b_conformance_testbed

    return open_e2b_conformance_testbed(scratch_dir)


REGISTRATION = ProviderRegistration(
    name="e2b",
    capabilities=CapabilitySet.of(
        Capability.FILE_API,
        Capability.BACKGROUND_PROCESSES,
        Capability.PAUSE,
        Capability.EXPOSED_PORTS,
    ),
    support_level=SupportLevel.PREVIEW,
    settings=SETTINGS,
    factory=open_e2b_provider,
    description="one E2B Firecracker microVM per Session, paused when idle (httpx, no SDK)",
)
"""``e2b``: the core contract, the file API (``file-api``, through envd's ``Filesystem``),
background processes (envd's process service) and exposed ports (E2B's client-proxy)."""

CONFORMANCE_TARGET = ConformanceTarget(
    provider="e2b",
    open=open_e2b_conformance_target,
    testbed=open_e2b_conformance_testbed,
    description="the fake E2B service on 127.0.0.1 (real local processes), no credentials",
    cost=TargetCost.SERVICE,
)
"""The offline target: the fake E2B service shipped in this distribution."""
