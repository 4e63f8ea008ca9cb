"""Settings of the OpenSandbox provider, read from its context's environment only when it is opened.

A light module: the plugin's entry point loads it on every mango command,
whichever provider is selected, so the protocol client (httpx, stamina) and
the fake are imported only by the factory and the conformance target.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from mango.provider import (
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_ENV,
    MAX_READ_BYTES_SETTING,
    CapabilitySet,
    ConfigurationError,
    ConformanceTarget,
    ConformanceTestbed,
    InvalidInput,
    ProviderContext,
    ProviderRegistration,
    Quirk,
    SettingSpec,
    SupportLevel,
    TargetCost,
    max_output_bytes,
    max_read_bytes,
    number_setting,
)
from mango_provider_opensandbox.layout import CAPABILITIES, DEFAULT_IMAGE, PROVIDER_NAME
from mango_provider_opensandbox.resources import (
    DEFAULT_CPU,
    DEFAULT_MEMORY,
    cpu_limit,
    memory_limit,
)

if TYPE_CHECKING:
    from mango_provider_opensandbox.provider import OpenSandboxProvider

__all__ = [
    "API_KEY_ENV",
    "CONFORMANCE_TARGET",
    "CPU_ENV",
    "DOMAIN_ENV",
    "IMAGE_ENV",
    "MAX_READ_BYTES_ENV",
    "MEMORY_ENV",
    "PROTOCOL_ENV",
    "REGISTRATION",
    "REQUEST_TIMEOUT_ENV",
    "SERVER_PROXY_ENV",
    "SETTINGS",
    "OpenSandboxSettings",
    "open_opensandbox_provider",
    "read_settings",
]

DOMAIN_ENV = "OPEN_SANDBOX_DOMAIN"
API_KEY_ENV = "OPEN_SANDBOX_API_KEY"
PROTOCOL_ENV = "OPEN_SANDBOX_PROTOCOL"
SERVER_PROXY_ENV = "OPEN_SANDBOX_USE_SERVER_PROXY"
IMAGE_ENV = "OPEN_SANDBOX_IMAGE"
SANDBOX_IMAGE_ENV = "MANGO_SANDBOX_IMAGE"
CPU_ENV = "OPEN_SANDBOX_CPU"
MEMORY_ENV = "OPEN_SANDBOX_MEMORY"
REQUEST_TIMEOUT_ENV = "OPEN_SANDBOX_REQUEST_TIMEOUT"
DEFAULT_REQUEST_TIMEOUT = 30.0
_TRUE = frozenset({"1", "t", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "f", "false", "no", "off"})

SETTINGS = (
    SettingSpec(
        env=DOMAIN_ENV,
        description="the OpenSandbox server, e.g. http://127.0.0.1:8080 (the API is under /v1)",
        required=True,
    ),
    SettingSpec(env=API_KEY_ENV, description="the server's API key (sent as OPEN-SANDBOX-API-KEY)"),
    SettingSpec(
        env=PROTOCOL_ENV,
        description="scheme for a domain or endpoint given without one (http or https)",
        default="http",
    ),
    SettingSpec(
        env=SERVER_PROXY_ENV,
        description="reach execd and the egress sidecar through the server (1) or directly (0)",
        default="0",
    ),
    SettingSpec(
        env=IMAGE_ENV,
        description=f"image of sandboxes whose spec names none (else ${SANDBOX_IMAGE_ENV})",
        default=DEFAULT_IMAGE,
    ),
    SettingSpec(
        env=CPU_ENV,
        description="default CPU limit, 0.001 to 1024 CPUs, e.g. 1, 1.5 or 500m",
        default=DEFAULT_CPU,
    ),
    SettingSpec(
        env=MEMORY_ENV,
        description="default memory limit, 1 byte to 1p, e.g. 2Gi, 512m or 2g (binary units)",
        default=DEFAULT_MEMORY,
    ),
    SettingSpec(
        env=REQUEST_TIMEOUT_ENV,
        description="seconds one API call may take, 0.001 to 3600 (a command's stream is bounded "
        "by its timeout)",
        default=str(int(DEFAULT_REQUEST_TIMEOUT)),
    ),
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
)
"""The settings the provider reads, as its registration declares them."""


@attrs.frozen
class OpenSandboxSettings:
    """The provider's settings, validated. ``repr`` never shows the key."""

    base_url: str
    api_key: str | None = attrs.field(repr=False)
    server_proxy: bool
    image: str
    cpu: str
    memory: str
    request_timeout: float
    max_output_bytes: int
    max_read_bytes: int


MAX_REQUEST_TIMEOUT = 3600.0
"""The largest ``OPEN_SANDBOX_REQUEST_TIMEOUT``: one API call for an hour is never meant."""


def read_settings(environ: Mapping[str, str]) -> OpenSandboxSettings:
    """Read and validate the settings from ``environ`` (the provider context's).

    :class:`ConfigurationError` names the variable at fault. The API key is
    never part of a message.
    """
    env = environ
    domain = env.get(DOMAIN_ENV, "").strip().rstrip("/")
    if not domain:
        raise ConfigurationError(
            f"{DOMAIN_ENV} is not set",
            hint="point it at the OpenSandbox server, e.g. http://127.0.0.1:8080",
        )
    protocol = env.get(PROTOCOL_ENV, "").strip().lower() or "http"
    if protocol not in ("http", "https"):
        raise ConfigurationError(f"{PROTOCOL_ENV} must be http or https, got {protocol!r}")
    if "://" in domain:
        scheme = domain.split("://", 1)[0].lower()
        if scheme not in ("http", "https"):
            raise ConfigurationError(f"{DOMAIN_ENV} must be an http(s) URL or host:port")
        base_url = domain
    else:
        base_url = f"{protocol}://{domain}"
    proxy_text = env.get(SERVER_PROXY_ENV, "").strip().lower()
    if proxy_text not in _TRUE | _FALSE:
        raise ConfigurationError(f"{SERVER_PROXY_ENV} must be a boolean (1/0), got {proxy_text!r}")
    try:
        memory = memory_limit(env.get(MEMORY_ENV, "").strip() or DEFAULT_MEMORY)
    except InvalidInput as exc:
        raise ConfigurationError(f"{MEMORY_ENV}: {exc}") from None
    try:
        cpu = cpu_limit(env.get(CPU_ENV, "").strip() or DEFAULT_CPU)
    except InvalidInput as exc:
        raise ConfigurationError(f"{CPU_ENV}: {exc}") from None
    return OpenSandboxSettings(
        base_url=base_url,
        api_key=env.get(API_KEY_ENV, "").strip() or None,
        server_proxy=proxy_text in _TRUE,
        image=env.get(IMAGE_ENV, "").strip()
        or env.get(SANDBOX_IMAGE_ENV, "").strip()
        or DEFAULT_IMAGE,
        cpu=cpu,
        memory=memory,
        request_timeout=number_setting(
            env, REQUEST_TIMEOUT_ENV, minimum=0.001, maximum=MAX_REQUEST_TIMEOUT, unit="seconds"
        )
        or DEFAULT_REQUEST_TIMEOUT,
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
    )


def open_opensandbox_provider(context: ProviderContext) -> OpenSandboxProvider:
    """The registration's factory: a provider in ``context``'s namespace. No I/O.

    The settings come from ``context.environ``, never from ``os.environ``.
    """
    from mango_provider_opensandbox.provider import OpenSandboxProvider

    settings = read_settings(context.environ)
    return OpenSandboxProvider(
        settings.base_url,
        api_key=settings.api_key,
        namespace=context.namespace,
        server_proxy=settings.server_proxy,
        image=settings.image,
        cpu=settings.cpu,
        memory=settings.memory,
        request_timeout=settings.request_timeout,
        max_output_bytes=settings.max_output_bytes,
        max_read_bytes=settings.max_read_bytes,
    )


REGISTRATION = ProviderRegistration(
    name=PROVIDER_NAME,
    capabilities=CapabilitySet(CAPABILITIES),
    support_level=SupportLevel.PREVIEW,
    quirks={Quirk.STEPS_AT_LEAST_ONCE},
    settings=SETTINGS,
    factory=open_opensandbox_provider,
    description="one OpenSandbox sandbox per Session (lifecycle API, execd, egress allowlists)",
)
"""``opensandbox``: package setup and limited network; preview."""


def _open_conformance_provider(
    scratch_dir: Path,
) -> AbstractAsyncContextManager[OpenSandboxProvider]:
    # Imported on use: the fake pulls in aiohttp and the local provider.
    from mango_provider_opensandbox.conformance import open_conformance_provider

    return open_conformance_provider(scratch_dir)


def _open_conformance_testbed(scratch_dir: Path) -> AbstractAsyncContextManager[ConformanceTestbed]:
    from mango_provider_opensandbox.conformance import open_conformance_testbed

    return open_conformance_testbed(scratch_dir)


CONFORMANCE_TARGET = ConformanceTarget(
    provider=PROVIDER_NAME,
    open=_open_conformance_provider,
    description="a fake OpenSandbox server on 127.0.0.1 (server proxy and direct endpoints)",
    testbed=_open_conformance_testbed,
    cost=TargetCost.SERVICE,
)
"""The offline target: the provider against its fake (needs the ``fake`` extra), with the
fake's upstream hosts and package mirror as the capability checks' testbed."""
