"""Settings of the ``cube`` provider, read from its context's environment only when it is opened.

A light module: the plugin's entry point loads it on every mango command,
whichever provider is selected, so the E2B protocol client (httpx, stamina)
is imported only by the factory.
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
    ProviderContext,
    ProviderRegistration,
    SettingSpec,
    SupportLevel,
    TargetCost,
    max_output_bytes,
    number_setting,
)
from mango_provider_e2b.options import EnvdOptions, api_url_setting, max_read_bytes, parse_duration

if TYPE_CHECKING:
    from mango_provider_e2b.provider import E2BProvider

__all__ = [
    "API_KEY_ENV",
    "API_URL_ENV",
    "CONFORMANCE_TARGET",
    "DEFAULT_DOMAIN",
    "DOMAIN_ENV",
    "IDLE_TIMEOUT_ENV",
    "PROXY_NODE_IP_ENV",
    "PROXY_PORT_ENV",
    "PROXY_SCHEME_ENV",
    "REGISTRATION",
    "SETTINGS",
    "TEMPLATE_ENV",
    "open_cube_conformance_target",
    "open_cube_provider",
    "read_cube_options",
]

API_URL_ENV = "CUBE_API_URL"
TEMPLATE_ENV = "CUBE_TEMPLATE_ID"
API_KEY_ENV = "CUBE_API_KEY"
DOMAIN_ENV = "CUBE_SANDBOX_DOMAIN"
PROXY_NODE_IP_ENV = "CUBE_PROXY_NODE_IP"
PROXY_PORT_ENV = "CUBE_PROXY_PORT_HTTP"
PROXY_SCHEME_ENV = "CUBE_PROXY_SCHEME"
IDLE_TIMEOUT_ENV = "CUBE_IDLE_TIMEOUT"
DEFAULT_DOMAIN = "cube.app"

SETTINGS = (
    SettingSpec(
        env=API_URL_ENV, description="CubeAPI URL, e.g. http://10.0.0.2:3000", required=True
    ),
    SettingSpec(
        env=TEMPLATE_ENV, description="template of new sandboxes (needs bash)", required=True
    ),
    SettingSpec(
        env=API_KEY_ENV,
        description="API key (Authorization: Bearer; X-API-Key on the data plane), if CubeAPI "
        "checks one",
        secret=True,
    ),
    SettingSpec(
        env=DOMAIN_ENV,
        description="sandbox domain: envd is <scheme>://49983-<id>.<domain>",
        default=DEFAULT_DOMAIN,
    ),
    SettingSpec(
        env=PROXY_NODE_IP_ENV,
        description="dial every data-plane connection to this CubeProxy node, keeping the "
        "sandbox's virtual host (default: DNS for *.<domain>)",
    ),
    SettingSpec(env=PROXY_PORT_ENV, description="the proxy node's port, 1 to 65535", default="80"),
    SettingSpec(env=PROXY_SCHEME_ENV, description="http or https to the proxy", default="http"),
    SettingSpec(
        env=IDLE_TIMEOUT_ENV,
        description="accepted for compatibility; no effect: CubeSandbox keeps no idle timeout "
        "(sandboxes live until deleted)",
        default="5m",
    ),
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_SETTING,
)
"""The settings the ``cube`` provider reads, as its registration declares them."""


def _port(env: Mapping[str, str]) -> int:
    port = number_setting(env, PROXY_PORT_ENV, minimum=1, maximum=65535, integer=True)
    return 80 if port is None else int(port)


def _scheme(text: str, port: int) -> str:
    value = text.strip().lower() or "http"
    if value in ("http", "https"):
        return value
    # As Cube's SDK: anything else means https on 443, http elsewhere.
    return "https" if port == 443 else "http"


def read_cube_options(environ: Mapping[str, str]) -> EnvdOptions:
    """Read and validate the Cube settings from ``environ`` (the provider context's).

    :class:`ConfigurationError` names the variable at fault. ``CUBE_API_URL``
    and ``CUBE_TEMPLATE_ID`` are required; the API key is optional (CubeAPI
    without an auth callback checks none) and never echoed.
    """
    from mango_provider_e2b.control import CUBE

    env = environ
    missing = [name for name in (API_URL_ENV, TEMPLATE_ENV) if not env.get(name, "").strip()]
    if missing:
        raise ConfigurationError(
            f"the cube provider needs {' and '.join(missing)}",
            hint="point CUBE_API_URL at CubeAPI and CUBE_TEMPLATE_ID at a template with bash",
        )
    port = _port(env)
    proxy = env.get(PROXY_NODE_IP_ENV, "").strip() or None
    return EnvdOptions(
        dialect=CUBE,
        api_url=api_url_setting(API_URL_ENV, env[API_URL_ENV]),
        api_key=env.get(API_KEY_ENV, "").strip() or None,
        template=env[TEMPLATE_ENV].strip(),
        domain=env.get(DOMAIN_ENV, "").strip() or DEFAULT_DOMAIN,
        envd_scheme=_scheme(env.get(PROXY_SCHEME_ENV, ""), port),
        proxy_host=proxy,
        proxy_port=port,
        idle_timeout=parse_duration(IDLE_TIMEOUT_ENV, env.get(IDLE_TIMEOUT_ENV, "") or "5m"),
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
    )


def open_cube_provider(context: ProviderContext) -> E2BProvider:
    """The registration's factory: validates the settings now, contacts CubeAPI on first use.

    The settings come from ``context.environ``, never from ``os.environ``.
    """
    from mango_provider_e2b.provider import E2BProvider

    return E2BProvider(read_cube_options(context.environ), namespace=context.namespace)


def open_cube_conformance_target(
    scratch_dir: Path,
) -> contextlib.AbstractAsyncContextManager[E2BProvider]:
    """A fresh provider over the fake service of ``scratch_dir`` in Cube mode."""
    from mango_provider_e2b.conformance import open_cube_conformance_provider

    return open_cube_conformance_provider(scratch_dir)


REGISTRATION = ProviderRegistration(
    name="cube",
    capabilities=CapabilitySet.of(
        Capability.FILE_API, Capability.BACKGROUND_PROCESSES, Capability.PAUSE
    ),
    support_level=SupportLevel.PREVIEW,
    settings=SETTINGS,
    factory=open_cube_provider,
    description="one Tencent CubeSandbox microVM per Session (E2B protocol, proxy-node routing)",
)
"""``cube``: the core contract, the file API (``file-api``, through envd's ``Filesystem``)
and background processes (envd's process service)."""

CONFORMANCE_TARGET = ConformanceTarget(
    provider="cube",
    open=open_cube_conformance_target,
    description="the fake E2B service in Cube mode (Bearer auth, proxy routing), no credentials",
    cost=TargetCost.SERVICE,
)
"""The offline target: the fake shipped in mango-provider-e2b, in Cube mode."""
