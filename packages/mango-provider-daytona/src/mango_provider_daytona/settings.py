"""Settings of the Daytona provider, read from its context's environment only when it is opened.

A light module: the plugin's entry point loads it on every mango command,
whichever provider is selected, so the API client (httpx, stamina) is
imported only by the factory.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs

from mango.provider import (
    MAX_OUTPUT_BYTES_SETTING,
    MAX_READ_BYTES_ENV,
    MAX_READ_BYTES_SETTING,
    Capability,
    CapabilitySet,
    ConfigurationError,
    ConformanceTarget,
    ConformanceTestbed,
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
from mango_provider_daytona.layout import (
    DEFAULT_AUTO_PAUSE_MINUTES,
    DEFAULT_START_TIMEOUT,
    PROVIDER_NAME,
)

if TYPE_CHECKING:
    from mango_provider_daytona.provider import DaytonaProvider

__all__ = [
    "API_KEY_ENV",
    "API_URL_ENV",
    "AUTO_PAUSE_ENV",
    "CONFORMANCE_TARGET",
    "DEFAULT_API_URL",
    "IMAGE_ENV",
    "MAX_READ_BYTES_ENV",
    "QUIRKS",
    "REGISTRATION",
    "SETTINGS",
    "SNAPSHOT_ENV",
    "START_TIMEOUT_ENV",
    "TARGET_ENV",
    "DaytonaSettings",
    "StderrProgress",
    "open_daytona_provider",
    "read_daytona_settings",
]

API_KEY_ENV = "DAYTONA_API_KEY"
API_URL_ENV = "DAYTONA_API_URL"
TARGET_ENV = "DAYTONA_TARGET"
SNAPSHOT_ENV = "DAYTONA_SNAPSHOT"
IMAGE_ENV = "DAYTONA_IMAGE"
AUTO_PAUSE_ENV = "DAYTONA_AUTO_PAUSE_MINUTES"
START_TIMEOUT_ENV = "DAYTONA_START_TIMEOUT"
DEFAULT_API_URL = "https://app.daytona.io/api"

SETTINGS = (
    SettingSpec(env=API_KEY_ENV, description="Daytona API key", secret=True, required=True),
    SettingSpec(env=API_URL_ENV, description="Daytona API URL", default=DEFAULT_API_URL),
    SettingSpec(env=TARGET_ENV, description="region to create sandboxes in (e.g. us, eu)"),
    SettingSpec(
        env=IMAGE_ENV,
        description="image Daytona builds for sandboxes whose spec names none "
        "(only then are CPU and memory limits honoured)",
    ),
    SettingSpec(
        env=SNAPSHOT_ENV,
        description="snapshot of sandboxes when no image is set (default: the account's)",
    ),
    SettingSpec(
        env=AUTO_PAUSE_ENV,
        description="idle minutes before Daytona pauses a sandbox (0: never)",
        default=str(DEFAULT_AUTO_PAUSE_MINUTES),
    ),
    SettingSpec(
        env=START_TIMEOUT_ENV,
        description="seconds to wait for a sandbox to start, up to a day (an archived one is "
        "restored first)",
        default=str(int(DEFAULT_START_TIMEOUT)),
    ),
    MAX_READ_BYTES_SETTING,
    MAX_OUTPUT_BYTES_SETTING,
)
"""The settings the Daytona provider reads, as its registration declares them."""

QUIRKS = frozenset({Quirk.OUTPUT_AT_END})
"""The toolbox answers a command when it ends: streaming delivers the output at the end."""


@attrs.frozen
class DaytonaSettings:
    """The Daytona provider's settings, validated. The key never appears in ``repr``."""

    api_key: str = attrs.field(repr=False)
    api_url: str
    target: str | None
    snapshot: str | None
    image: str | None
    auto_pause_minutes: int
    start_timeout: float
    max_output_bytes: int
    max_read_bytes: int


MAX_AUTO_PAUSE_MINUTES = 2**31 - 1
"""The largest ``DAYTONA_AUTO_PAUSE_MINUTES``: the API's 32-bit interval."""
MAX_START_TIMEOUT = 24 * 3600.0
"""The largest ``DAYTONA_START_TIMEOUT``: a day (restoring an archived sandbox takes minutes)."""


def read_daytona_settings(environ: Mapping[str, str]) -> DaytonaSettings:
    """Read and validate the settings from ``environ`` (the provider context's).

    Raises :class:`ConfigurationError` naming the variable at fault; the key's
    value never appears in a message. Empty values count as unset.
    """
    from mango_provider_daytona.api import check_api_url

    env = environ
    api_key = env.get(API_KEY_ENV, "").strip()
    if not api_key:
        raise ConfigurationError(
            f"{API_KEY_ENV} is not set: the daytona provider needs an API key",
            hint=f"create one in the Daytona dashboard and export {API_KEY_ENV}",
        )
    start_timeout = number_setting(
        env, START_TIMEOUT_ENV, minimum=0.001, maximum=MAX_START_TIMEOUT, unit="seconds"
    )
    auto_pause = number_setting(
        env, AUTO_PAUSE_ENV, minimum=0, maximum=MAX_AUTO_PAUSE_MINUTES, integer=True, unit="minutes"
    )
    return DaytonaSettings(
        api_key=api_key,
        api_url=check_api_url(env.get(API_URL_ENV, "").strip() or DEFAULT_API_URL, API_URL_ENV),
        target=env.get(TARGET_ENV, "").strip() or None,
        snapshot=env.get(SNAPSHOT_ENV, "").strip() or None,
        image=env.get(IMAGE_ENV, "").strip() or None,
        auto_pause_minutes=DEFAULT_AUTO_PAUSE_MINUTES if auto_pause is None else int(auto_pause),
        start_timeout=DEFAULT_START_TIMEOUT if start_timeout is None else start_timeout,
        max_output_bytes=max_output_bytes(env),
        max_read_bytes=max_read_bytes(env),
    )


@attrs.define
class StderrProgress:
    """Prints progress (a sandbox being started or restored) on the command line."""

    stream: TextIO | None = None

    def __call__(self, line: str) -> None:
        """Report one line of progress."""
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"mango: daytona: {line}", file=stream, flush=True)


def open_daytona_provider(context: ProviderContext) -> DaytonaProvider:
    """The registration's factory: a :class:`DaytonaProvider` in ``context``'s namespace.

    Its settings come from ``context.environ``, never from ``os.environ``. It
    does no I/O; Daytona is contacted on first use.
    """
    from mango_provider_daytona.provider import DaytonaProvider

    settings = read_daytona_settings(context.environ)
    return DaytonaProvider(
        settings.api_url,
        settings.api_key,
        namespace=context.namespace,
        target=settings.target,
        snapshot=settings.snapshot,
        image=settings.image,
        auto_pause_minutes=settings.auto_pause_minutes,
        start_timeout=settings.start_timeout,
        max_output_bytes=settings.max_output_bytes,
        max_read_bytes=settings.max_read_bytes,
        progress=StderrProgress(),
    )


REGISTRATION = ProviderRegistration(
    name=PROVIDER_NAME,
    capabilities=CapabilitySet.of(
        Capability.FILE_API, Capability.BACKGROUND_PROCESSES, Capability.EXPOSED_PORTS
    ),
    support_level=SupportLevel.PREVIEW,
    settings=SETTINGS,
    factory=open_daytona_provider,
    description="one Daytona sandbox per Session (API and toolbox over httpx)",
    quirks=QUIRKS,
)
"""``daytona``: the core contract, the file API, background processes and exposed ports (preview
links); output at the end of each command."""


def _open_conformance_provider(scratch_dir: Path) -> AbstractAsyncContextManager[DaytonaProvider]:
    # Imported on use: the fake pulls in aiohttp and the local provider.
    from mango_provider_daytona.conformance import open_conformance_provider

    return open_conformance_provider(scratch_dir)


def _open_conformance_testbed(scratch_dir: Path) -> AbstractAsyncContextManager[ConformanceTestbed]:
    from mango_provider_daytona.conformance import open_conformance_testbed

    return open_conformance_testbed(scratch_dir)


CONFORMANCE_TARGET = ConformanceTarget(
    provider=PROVIDER_NAME,
    open=_open_conformance_provider,
    testbed=_open_conformance_testbed,
    description="a fake Daytona (API, toolbox and preview proxy) on 127.0.0.1",
    cost=TargetCost.SERVICE,
)
"""The offline target: the fake Daytona, a fresh one per scratch directory."""
