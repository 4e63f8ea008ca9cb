"""The offline conformance target: the provider against its fake server on 127.0.0.1.

Every entry of :func:`open_conformance_provider` with the same scratch
directory (on the same event loop) shares one :class:`FakeOpenSandbox`, so a
provider from a later entry attaches to what earlier ones made (a restarted
worker); the fake stops when the last entry closes. Providers alternate
between the server proxy and direct endpoints, so both data paths are
exercised by the same checks.

Beside the fake runs its "upstream": two named page hosts and a package
mirror (:class:`~mango_provider_opensandbox.fake.upstream.UpstreamHosts`),
reachable from a sandbox only as its egress policy allows. The testbed
(:func:`open_conformance_testbed`) hands them to the capability checks:
the page hosts as egress probes, the fake's policy as the drift backdoor,
the mirror (through the fake image's ``apt-get``) as the package source,
and a free host port for the ``exposed-ports`` check (the fake's sandboxes
are host processes, so their server listens on a port of the host; the
fake's endpoint proxies to it as execd's ``/proxy/{port}`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from mango.provider import (
    ConformanceTestbed,
    EgressProbe,
    NetworkTestbed,
    PackagePlan,
    PackageSource,
    PortTestbed,
    SandboxRef,
)
from mango.provider.ownership import derived_namespace
from mango_provider_opensandbox.provider import OpenSandboxProvider

if TYPE_CHECKING:
    from mango_provider_opensandbox.fake import FakeOpenSandbox
    from mango_provider_opensandbox.fake.upstream import UpstreamHosts

__all__ = [
    "MIRROR_HOST",
    "MISSING_PACKAGE",
    "PACKAGES",
    "PROBE_HOSTS",
    "free_port",
    "open_conformance_provider",
    "open_conformance_testbed",
]

PROBE_HOSTS = ("one.egress.mango-conformance.test", "two.egress.mango-conformance.test")
"""The upstream page hosts the network checks try to reach."""
MIRROR_HOST = "mirror.packages.mango-conformance.test"
"""The upstream package mirror (the fake image's ``apt`` source)."""
PACKAGES = ("mango-probe-first", "mango-probe-second")
"""What the mirror has."""
MISSING_PACKAGE = "mango-probe-missing"
"""A package the mirror does not have."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@attrs.define(eq=False)
class _Shared:
    fake: FakeOpenSandbox
    upstream: UpstreamHosts
    users: int = 0
    entries: itertools.count[int] = attrs.field(factory=itertools.count)


_RUNNING: dict[tuple[str, int], _Shared] = {}


@contextlib.asynccontextmanager
async def _shared(scratch_dir: Path) -> AsyncIterator[_Shared]:
    """The fake (and its upstream) of ``scratch_dir`` on this loop, started by the first user."""
    from mango_provider_opensandbox.fake import FakeOpenSandbox
    from mango_provider_opensandbox.fake.upstream import UpstreamHosts

    key = (os.fspath(scratch_dir), id(asyncio.get_running_loop()))
    shared = _RUNNING.get(key)
    if shared is None:
        pages = {host: f"reached-{secrets.token_hex(6)}" for host in PROBE_HOSTS}
        upstream = UpstreamHosts(pages=pages, mirrors={MIRROR_HOST: PACKAGES})
        await upstream.start()
        fake = FakeOpenSandbox(
            Path(scratch_dir) / "opensandbox-fake", apt_source=upstream.url(MIRROR_HOST)
        )
        fake.upstream.update(dict.fromkeys(upstream.names(), "127.0.0.1"))
        try:
            await fake.start()
        except BaseException:
            await upstream.stop()
            raise
        shared = _RUNNING[key] = _Shared(fake, upstream)
    shared.users += 1
    try:
        yield shared
    finally:
        shared.users -= 1
        if shared.users == 0:
            del _RUNNING[key]
            try:
                await shared.fake.stop()
            finally:
                await shared.upstream.stop()


@contextlib.asynccontextmanager
async def open_conformance_provider(scratch_dir: Path) -> AsyncIterator[OpenSandboxProvider]:
    """Yield a fresh :class:`OpenSandboxProvider` on the fake of ``scratch_dir``."""
    async with _shared(scratch_dir) as shared:
        provider = OpenSandboxProvider(
            shared.fake.url,
            api_key=shared.fake.api_key,
            namespace=derived_namespace("conformance", os.fspath(scratch_dir)),
            server_proxy=next(shared.entries) % 2 == 0,
        )
        try:
            yield provider
        finally:
            await provider.aclose()


@contextlib.asynccontextmanager
async def open_conformance_testbed(scratch_dir: Path) -> AsyncIterator[ConformanceTestbed]:
    """The upstream hosts, the policy backdoor and the package mirror of ``scratch_dir``'s fake."""
    async with _shared(scratch_dir) as shared:
        fake, upstream = shared.fake, shared.upstream

        async def drift(ref: SandboxRef, hosts: tuple[str, ...]) -> None:
            # Behind the provider's back, as an operator or a restarted sidecar would.
            rules = [{"action": "allow", "target": host} for host in hosts]
            fake.set_policy(ref.external_id, {"defaultAction": "deny", "egress": rules})

        probes = tuple(
            EgressProbe(host=host, url=upstream.url(host) + "/", token=token)
            for host, token in upstream.pages.items()
        )
        yield ConformanceTestbed(
            network=NetworkTestbed(probes=probes, drift=drift),
            packages=PackageSource(
                plan=PackagePlan(apt=PACKAGES),
                failing=PackagePlan(apt=(PACKAGES[0], MISSING_PACKAGE)),
                missing=MISSING_PACKAGE,
                hosts=(MIRROR_HOST,),
            ),
            ports=PortTestbed(port=free_port()),
        )
