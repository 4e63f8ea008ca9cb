"""A sandbox container's network, and the network it has only while its packages install.

A spec's ``network`` is what tools see: ``none`` (no interface but
loopback) or ``bridge`` (the Engine's default bridge). Package managers need
a network even when the spec says ``none``, so such a container, when its
spec has packages, is made on the bridge (``HostConfig.NetworkMode=bridge``)
and labelled ``io.mango.network=none``: the network it has once set up.
SessionManager's package step brackets the installs with
:func:`begin_setup` (connect the bridge, if it is not) and :func:`end_setup`
(disconnect it) before the binding is published, so a bound sandbox never
has it. Docker keeps a disconnected container disconnected across restarts.

Attach re-enforces it (:func:`enforce`): a labelled container found
connected (someone ran ``docker network connect``) is disconnected before a
client is handed out. The label only ever takes a network away, so a
forged one weakens nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mango.provider import NetworkMode, ProviderUnavailable, SandboxSpec
from mango_provider_docker.engine import Engine

__all__ = [
    "NETWORK_LABEL",
    "SETUP_NETWORK",
    "begin_setup",
    "connected_networks",
    "creation_labels",
    "creation_mode",
    "end_setup",
    "enforce",
    "network_problems",
    "setup_only",
]

NETWORK_LABEL = "io.mango.network"
"""Label of a container made on the bridge for its package setup: the network it keeps (none)."""
SETUP_NETWORK = "bridge"
"""The network a ``none`` container has while its packages install: the Engine's default bridge."""
_JSON = {"Content-Type": "application/json"}


def _wants_setup_network(spec: SandboxSpec) -> bool:
    return spec.network is NetworkMode.NONE and not spec.packages.is_empty


def creation_mode(spec: SandboxSpec) -> str:
    """``HostConfig.NetworkMode`` of a new container for ``spec``."""
    if spec.network is NetworkMode.BRIDGE or _wants_setup_network(spec):
        return SETUP_NETWORK
    return "none"


def creation_labels(spec: SandboxSpec) -> dict[str, str]:
    """The network label of a new container for ``spec`` (none unless it gets a setup network)."""
    return {NETWORK_LABEL: NetworkMode.NONE.value} if _wants_setup_network(spec) else {}


def setup_only(inspect: Mapping[str, Any]) -> bool:
    """True for a container whose bridge is for its package setup only (by its label)."""
    config = inspect.get("Config")
    labels = config.get("Labels") if isinstance(config, Mapping) else None
    return isinstance(labels, Mapping) and labels.get(NETWORK_LABEL) == NetworkMode.NONE.value


def connected_networks(inspect: Mapping[str, Any]) -> set[str]:
    """The networks an inspect document says the container is connected to."""
    settings = inspect.get("NetworkSettings")
    networks = settings.get("Networks") if isinstance(settings, Mapping) else None
    return set(networks) if isinstance(networks, Mapping) else set()


def network_problems(inspect: Mapping[str, Any], spec: SandboxSpec) -> list[str]:
    """How the container's network differs from one mango makes for ``spec``.

    ``none``: a container in network mode ``none``, or a labelled set-up
    container on the bridge (connected only during setup, which
    :func:`enforce` and :func:`end_setup` see to). ``bridge``: network mode
    ``bridge`` and no other network, not labelled.
    """
    host = inspect.get("HostConfig")
    mode = host.get("NetworkMode") if isinstance(host, Mapping) else None
    labelled = setup_only(inspect)
    wanted = NetworkMode.BRIDGE.value if spec.network is NetworkMode.BRIDGE else "none"
    if labelled and wanted == NetworkMode.BRIDGE.value:
        return [f"made with no network after its package setup, where the spec asks for {wanted!r}"]
    expected = SETUP_NETWORK if labelled else wanted
    problems = []
    if mode != expected:
        problems.append(f"network mode {mode!r} where the spec asks for {expected!r}")
    extra = sorted(connected_networks(inspect) - {expected})
    if extra:
        problems.append(f"attached to the networks {extra}")
    return problems


async def _set(engine: Engine, container_id: str, *, connect: bool) -> None:
    """Connect or disconnect the setup network; a race that left it so already is fine."""
    action = "connect" if connect else "disconnect"
    body: dict[str, Any] = {"Container": container_id}
    if not connect:
        body["Force"] = True
    # 403: already connected; 500: not connected (the daemon's answers to a repeated call).
    status, _, _ = await engine.call(
        f"{action} container {container_id} {'to' if connect else 'from'} {SETUP_NETWORK}",
        "POST",
        f"networks/{SETUP_NETWORK}/{action}",
        data=json.dumps(body).encode(),
        headers=_JSON,
        expected={403, 500},
    )
    if status in (403, 500):
        inspect = await engine.inspect_container(container_id)
        connected = inspect is not None and SETUP_NETWORK in connected_networks(inspect)
        if connected != connect:
            raise ProviderUnavailable(
                f"could not {action} container {container_id} "
                f"{'to' if connect else 'from'} the {SETUP_NETWORK} network (status {status})"
            )


async def begin_setup(engine: Engine, container_id: str) -> None:
    """Connect a set-up container to the bridge for its package managers (if not connected)."""
    inspect = await engine.inspect_container(container_id)
    if inspect is None or not setup_only(inspect):
        return
    if SETUP_NETWORK not in connected_networks(inspect):
        await _set(engine, container_id, connect=True)


async def end_setup(engine: Engine, container_id: str) -> None:
    """Disconnect a set-up container from the bridge; afterwards it has loopback only."""
    inspect = await engine.inspect_container(container_id)
    if inspect is None or not setup_only(inspect):
        return
    if connected_networks(inspect):
        await _set(engine, container_id, connect=False)


async def enforce(engine: Engine, container_id: str, inspect: Mapping[str, Any]) -> None:
    """Before a client of a bound container is handed out: a set-up container has no network."""
    if setup_only(inspect) and connected_networks(inspect):
        await _set(engine, container_id, connect=False)
