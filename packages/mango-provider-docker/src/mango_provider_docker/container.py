"""The container behind a sandbox: its create body and its resource limits.

Every sandbox container:

* runs an idle ``/bin/sh`` loop as its main process, under the Engine's init
  (``HostConfig.Init``: docker-init/tini as PID 1 reaps orphaned zombies);
* has ``/workspace`` as its working directory (the daemon creates it);
* has no network (``NetworkMode=none``) unless the spec asks for ``bridge``,
  or has packages to install: then the bridge only until they are
  installed (:mod:`mango_provider_docker.network`);
* has memory, CPU and pids limits: the spec's values, else the provider's
  defaults (``0`` in a default means "no limit");
* carries the ownership labels of :mod:`mango_provider_docker.layout`, and the
  deployment's extra labels, which may set none of mango's own
  (:func:`check_extra_labels`);
* bind-mounts its host directory's ``files/`` read-only at
  ``/mnt/session/uploads``, ``outputs/`` writable at
  ``/mnt/session/outputs`` and ``skills/`` read-only at ``/workspace/skills``
  (:mod:`mango_provider_docker.mounts`).

Labels prove nothing on their own (anyone who reaches the daemon can set
them), so before adopting an existing container create and attach compare its
configuration with this list (:func:`configuration_problems`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mango.provider import InvalidInput, NetworkMode, SandboxSpec
from mango.provider.ownership import Ownership
from mango_provider_docker.commands import SAFE_PATH, SHELL
from mango_provider_docker.layout import WORKSPACE
from mango_provider_docker.limits import (
    MAX_CPUS,
    MAX_MEMORY_BYTES,
    MAX_PIDS_LIMIT,
    MIN_CPUS,
    MIN_MEMORY_BYTES,
    MIN_PIDS_LIMIT,
    Limits,
    check_cpus,
    check_memory,
    check_pids_limit,
    parse_memory,
)
from mango_provider_docker.mounts import container_mounts, mount_problems
from mango_provider_docker.network import (
    NETWORK_LABEL,
    creation_labels,
    creation_mode,
    network_problems,
)

__all__ = [
    "IDLE_SCRIPT",
    "MAX_CPUS",
    "MAX_MEMORY_BYTES",
    "MAX_PIDS_LIMIT",
    "MIN_CPUS",
    "MIN_MEMORY_BYTES",
    "MIN_PIDS_LIMIT",
    "Limits",
    "check_cpus",
    "check_extra_labels",
    "check_memory",
    "check_pids_limit",
    "check_publish_ports",
    "configuration_problems",
    "container_config",
    "default_limits",
    "parse_memory",
    "resolve_limits",
]

IDLE_SCRIPT = "while :; do sleep 3600; done"
"""The main process: keeps the container alive so commands can be exec-ed into it."""


def resolve_limits(spec: SandboxSpec, defaults: Limits) -> Limits:
    """The spec's limits where it sets them, else ``defaults``.

    Raises :class:`InvalidInput` for a spec limit outside the accepted ranges.
    """
    memory = defaults.memory_bytes
    if spec.memory_bytes is not None:
        memory = check_memory(spec.memory_bytes)
    nano_cpus = defaults.nano_cpus if spec.cpus is None else check_cpus(float(spec.cpus))
    pids = defaults.pids_limit if spec.pids_limit is None else check_pids_limit(spec.pids_limit)
    return Limits(memory_bytes=memory, nano_cpus=nano_cpus, pids_limit=pids)


def default_limits(memory: str, cpus: float, pids_limit: int) -> Limits:
    """Provider defaults from settings values; ``0`` (or ``"0"``) means no limit.

    Raises :class:`InvalidInput` for a value outside the accepted ranges.
    """
    return Limits(
        memory_bytes=parse_memory(memory) or None,
        nano_cpus=check_cpus(cpus),
        pids_limit=check_pids_limit(pids_limit),
    )


def check_extra_labels(value: Mapping[str, str]) -> dict[str, str]:
    """The extra labels of every container, refused if they set an ownership or network label."""
    labels = dict(value)
    clash = Ownership.reserved(labels) | ({NETWORK_LABEL} & labels.keys())
    if clash:
        raise InvalidInput(f"extra labels may not set the ownership labels {sorted(clash)}")
    return labels


def check_publish_ports(value: Iterable[int]) -> tuple[int, ...]:
    """Sorted distinct TCP port numbers (1 to 65535), else :class:`InvalidInput`."""
    ports = tuple(value)
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidInput(f"a port to publish is a number from 1 to 65535, got {port!r}")
    return tuple(sorted(set(ports)))


def container_config(
    *,
    image: str,
    spec: SandboxSpec,
    limits: Limits,
    labels: Mapping[str, str],
    host_dir: Path,
    ports: tuple[int, ...] = (),
) -> dict[str, Any]:
    """The body of ``POST /containers/create`` for one sandbox (mounts from ``host_dir``).

    ``ports`` are published on 127.0.0.1 only (an ephemeral host port each),
    and only on the ``bridge`` network: a sandbox without a network has no
    port to reach.
    """
    host_config: dict[str, Any] = {
        "Init": True,
        "NetworkMode": creation_mode(spec),
        "RestartPolicy": {"Name": "no"},
        "Mounts": container_mounts(host_dir),
    }
    exposed: dict[str, Any] = {}
    if ports and spec.network is NetworkMode.BRIDGE:
        exposed = {f"{port}/tcp": {} for port in ports}
        host_config["PortBindings"] = {
            key: [{"HostIp": "127.0.0.1", "HostPort": ""}] for key in exposed
        }
    if limits.memory_bytes is not None:
        host_config["Memory"] = limits.memory_bytes
    if limits.nano_cpus is not None:
        host_config["NanoCpus"] = limits.nano_cpus
    if limits.pids_limit is not None:
        host_config["PidsLimit"] = limits.pids_limit
    return {
        "Image": image,
        # [""] resets an image ENTRYPOINT, so the idle loop is the main process.
        "Entrypoint": [""],
        "Cmd": [SHELL, "-c", IDLE_SCRIPT],
        "WorkingDir": WORKSPACE,
        "Env": [f"PATH={SAFE_PATH}", f"HOME={WORKSPACE}"],
        "Labels": {**labels, **creation_labels(spec)},
        "AttachStdin": False,
        "AttachStdout": False,
        "AttachStderr": False,
        "Tty": False,
        "OpenStdin": False,
        "ExposedPorts": exposed,
        "HostConfig": host_config,
    }


def _limit(value: object) -> int:
    """A limit from an inspect document: 0 for none (Docker reports none as null, 0 or -1)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _isolation_problems(host: Mapping[str, Any]) -> list[str]:
    """What mango never asks for, whatever the spec: each one weakens the sandbox."""
    problems = []
    if host.get("Init") is not True:
        problems.append("no init process")
    if host.get("Privileged"):
        problems.append("privileged")
    for key, what in (
        ("CapAdd", "added capabilities"),
        ("VolumesFrom", "volumes of other containers"),
        ("Devices", "host devices"),
        ("SecurityOpt", "security options"),
    ):
        if host.get(key):
            problems.append(f"{what} {host.get(key)!r}")
    bindings = host.get("PortBindings")
    problems.extend(
        f"port {key} published beyond 127.0.0.1"
        for key, published in (bindings.items() if isinstance(bindings, Mapping) else ())
        for binding in published or ()
        if not isinstance(binding, Mapping) or binding.get("HostIp") != "127.0.0.1"
    )
    for key in ("PidMode", "IpcMode", "UTSMode", "UsernsMode"):
        mode = str(host.get(key) or "")
        if mode == "host" or mode.startswith("container:"):
            problems.append(f"{key} {mode!r}")
    return problems


def _limit_problems(host: Mapping[str, Any], spec: SandboxSpec, expected: Limits) -> list[str]:
    """A limit the spec sets must be exactly that; a default one must be there (any value:
    the defaults may have changed since the container was made)."""
    problems = []
    for key, given, wanted in (
        ("Memory", spec.memory is not None, expected.memory_bytes),
        ("NanoCpus", spec.cpus is not None, expected.nano_cpus),
        ("PidsLimit", spec.pids_limit is not None, expected.pids_limit),
    ):
        actual = _limit(host.get(key))
        if given and actual != (wanted or 0):
            problems.append(f"{key} {actual or 'none'} where the spec asks for {wanted or 'none'}")
        elif not given and wanted and not actual:
            problems.append(f"no {key} limit")
    return problems


def configuration_problems(
    inspect: Mapping[str, Any], spec: SandboxSpec, defaults: Limits, host_dir: Path
) -> list[str]:
    """How an existing container differs from what :func:`container_config` makes for ``spec``.

    Labels can be forged by anyone who can reach the daemon, so create and
    attach also check the configuration before adopting a container: its
    network (the spec's, see :func:`~mango_provider_docker.network.network_problems`),
    an init process, no privilege, added capabilities, devices, security
    options or shared host namespaces, no mount but the resource binds
    from ``host_dir`` (or an older generation's subset of them: see
    :func:`~mango_provider_docker.mounts.mount_problems`), the spec's image
    if it names one, and limits (see :func:`_limit_problems`). An empty list
    means nothing mango would refuse.
    """
    host = inspect.get("HostConfig")
    config = inspect.get("Config")
    if not isinstance(host, Mapping) or not isinstance(config, Mapping):
        return ["no configuration in its inspect document"]
    problems = network_problems(inspect, spec)
    problems += _isolation_problems(host)
    problems += mount_problems(host, host_dir)[1]
    if spec.image is not None and config.get("Image") != spec.image:
        problems.append(f"image {config.get('Image')!r} where the spec asks for {spec.image!r}")
    problems += _limit_problems(host, spec, resolve_limits(spec, defaults))
    return problems
