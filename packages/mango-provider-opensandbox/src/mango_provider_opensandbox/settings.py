"""Settings of the OpenSandbox provider, read from the environment only when it is opened."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from mango.provider import (
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_ENV,
    MAX_READ_BYTES_SETTING,
    CapabilitySet,
    ConfigurationError,
    ConformanceTarget,
    InvalidInput,
    ProviderContext,
    ProviderRegistration,
    SettingSpec,
    SupportLevel,
    max_output_bytes,
    max_read_bytes,
)
from mango_provider_opensandbox.conformance import (
    open_conformance_provider,
    open_conformance_testbed,
)
from mango_provider_opensandbox.layout import PROVIDER_NAME
from mango_provider_opensandbox.provider import (
    CAPABILITIES,
    DEFAULT_IMAGE,
    OpenSandboxProvider,
)
from mango_provider_opensandbox.resources import DEFAULT_CPU, DEFAULT_MEMORY, memory_limit

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
    SettingSpec(env=CPU_ENV, description="default CPU limit, e.g. 1 or 500m", default=DEFAULT_CPU),
    SettingSpec(
        env=MEMORY_ENV, description="default memory limit, e.g. 2Gi or 512m", default=DEFAULT_MEMORY
    ),
    SettingSpec(
        env=REQUEST_TIMEOUT_ENV,
        description="seconds one API call may take (a command's stream is bounded by its timeout)",
        default="30",
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


def _positive(env: Mapping[str, str], name: str, default: float, *, integer: bool) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text, 10) if integer else float(text)
    except ValueError:
        value = 0
    if not value > 0 or value != value:  # noqa: PLR0124 - NaN is not a timeout
        kind = "a whole number" if integer else "a number"
        raise ConfigurationError(f"{name} must be {kind} > 0, got {text!r}")
    return value


def read_settings(environ: Mapping[str, str] | None = None) -> OpenSandboxSettings:
    """Read and validate the settings; :class:`ConfigurationError` names the variable at fault.

    The API key is never part of a message.
    """
    env = os.environ if environ is None else environ
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
    memory = env.get(MEMORY_ENV, "").strip() or DEFAULT_MEMORY
    try:
        memory = memory_limit(memory)
    except InvalidInput as exc:
        raise ConfigurationError(f"{MEMORY_ENV}: {exc}") from None
    return OpenSandboxSettings(
        base_url=base_url,
        api_key=env.get(API_KEY_ENV, "").strip() or None,
        server_proxy=proxy_text in _TRUE,
        image=env.get(IMAGE_ENV, "").strip()
        or env.get(SANDBOX_IMAGE_ENV, "").strip()
        or DEFAULT_IMAGE,
        cpu=env.get(CPU_ENV, "").strip() or DEFAULT_CPU,
        memory=memory,
        request_timeout=_positive(env, REQUEST_TIMEOUT_ENV, 30.0, integer=False),
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
    )


def open_opensandbox_provider(
    context: ProviderContext, environ: Mapping[str, str] | None = None
) -> OpenSandboxProvider:
    """The registration's factory: a provider in ``context``'s namespace. No I/O."""
    settings = read_settings(environ)
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
    settings=SETTINGS,
    factory=open_opensandbox_provider,
    description="one OpenSandbox sandbox per Session (lifecycle API, execd, egress allowlists)",
)
"""``opensandbox``: package setup and limited network; preview."""

CONFORMANCE_TARGET = ConformanceTarget(
    provider=PROVIDER_NAME,
    open=open_conformance_provider,
    description="a fake OpenSandbox server on 127.0.0.1 (server proxy and direct endpoints)",
    testbed=open_conformance_testbed,
)
"""The offline target: the provider against its fake (needs the ``fake`` extra), with the
fake's upstream hosts and package mirror as the capability checks' testbed."""
