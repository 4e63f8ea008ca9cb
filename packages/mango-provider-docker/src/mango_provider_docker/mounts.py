"""The resource mounts of a sandbox: provider-owned host directories bound into its container.

Each sandbox's host directory (``<resource dir>/mango-<32 hex>/``, 0700,
see :mod:`mango_provider_docker.layout`) holds::

    files/     0755  -> /mnt/session/uploads  read-only   File Resource copies (0444)
    outputs/   0777  -> /mnt/session/outputs  read-write  what the sandbox publishes
    skills/    0755  -> /workspace/skills     read-only   pinned skill trees (0444 files)
    memory/    0755
      <slug>/  0755  -> /mnt/memory/<slug>    as attached one Memory Store each (spec)
    state/     0700  never mounted                        markers, archives, baselines, the lock

Trust boundary: the container sees only the mounted directories. The
uploads and skills mounts are read-only in the kernel (bind mounts with
``ReadOnly``), so no process in the container, root included, can change,
add or remove a File Resource or a skill file; only the worker writes there.
The outputs directory is the sandbox's to write (0777: whichever user
the image runs as); its content is untrusted and is only ever read through
the Engine's archive API (never followed on the host) when it is published.
The state directory, with the markers that say which resource a copy belongs
to, is out of the container's reach. A Memory Store's directory is the
sandbox's to edit when it is attached ``read_write``; a ``read_only`` one is
a read-only bind (even root in the container cannot write it). Its baseline
lives in ``state/``.

Containers created before these mounts existed lack them: those made before
the resource mounts have none, those made before the skills mount have the
first two. They keep working for commands and files, and :class:`MountState`
reports what they have so that File Resources, outputs and skills fail
closed (a :class:`PermanentError` saying to recreate the Session's sandbox)
instead of pretending. Attach and adoption read the mounts from the
container's configuration: exactly the binds of one of those generations
(plus one per Memory Store of the spec), from this sandbox's own host
directory, in these modes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from mango.provider import (
    OUTPUTS_ROOT,
    SKILLS_ROOT,
    UPLOADS_ROOT,
    MemoryStoreMount,
    PermanentError,
)
from mango.provider.hostdirs import canonical_path, host_errors
from mango_provider_docker.layout import RESOURCE_DIR_ENV

__all__ = [
    "FILES_DIR",
    "MEMORY_DIR",
    "OUTPUTS_DIR",
    "SKILLS_DIR",
    "STATE_DIR",
    "MountState",
    "container_mounts",
    "ensure_mount_dirs",
    "mount_problems",
    "predates",
]

FILES_DIR = "files"
OUTPUTS_DIR = "outputs"
SKILLS_DIR = "skills"
MEMORY_DIR = "memory"
STATE_DIR = "state"
_MODES = {
    FILES_DIR: 0o755,
    OUTPUTS_DIR: 0o777,
    SKILLS_DIR: 0o755,
    MEMORY_DIR: 0o755,
    STATE_DIR: 0o700,
}


@attrs.frozen
class MountState:
    """Which resource mounts a container has (all of them, for every container made today)."""

    uploads: bool = True
    outputs: bool = True
    skills: bool = True
    memory: frozenset[str] = frozenset()
    """The runtime paths of its Memory Store mounts (``/mnt/memory/<slug>``)."""

    @classmethod
    def none(cls) -> MountState:
        """A container created before the resource mounts."""
        return cls(uploads=False, outputs=False, skills=False)


def predates(what: str, container_id: str) -> PermanentError:
    """The error of a resource operation on a container older than its mount."""
    return PermanentError(
        f"docker container {container_id[:12]} was created before its {what} existed: "
        "recreate the Session's sandbox to use it",
        hint="delete the Session (mango sessions delete) and start it again; its new "
        "container has the mounts",
    )


def ensure_mount_dirs(host_dir: Path, memory: Sequence[MemoryStoreMount] = ()) -> None:
    """Create-if-absent ``files/``, ``outputs/``, ``skills/``, ``memory/<slug>/``,
    ``state/`` in their modes
    (whatever the umask)."""
    modes = {**_MODES, **{f"{MEMORY_DIR}/{mount.slug}": 0o755 for mount in memory}}
    with host_errors(host_dir.parent, setting=RESOURCE_DIR_ENV, what="cannot create directories"):
        for name, mode in modes.items():
            path = host_dir / name
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=mode)
            if path.is_symlink() or not path.is_dir():
                raise PermanentError(f"{path} is not a plain directory")
            path.chmod(mode)


def container_mounts(
    host_dir: Path, memory: Sequence[MemoryStoreMount] = ()
) -> list[dict[str, Any]]:
    """``HostConfig.Mounts`` of a new container: the binds, from ``host_dir``."""
    return [
        {
            "Type": "bind",
            "Source": str(host_dir / FILES_DIR),
            "Target": UPLOADS_ROOT,
            "ReadOnly": True,
        },
        {
            "Type": "bind",
            "Source": str(host_dir / OUTPUTS_DIR),
            "Target": OUTPUTS_ROOT,
            "ReadOnly": False,
        },
        {
            "Type": "bind",
            "Source": str(host_dir / SKILLS_DIR),
            "Target": SKILLS_ROOT,
            "ReadOnly": True,
        },
        *(
            {
                "Type": "bind",
                "Source": str(host_dir / MEMORY_DIR / mount.slug),
                "Target": mount.runtime_path,
                "ReadOnly": mount.read_only,
            }
            for mount in memory
        ),
    ]


_EXPECTED = {
    UPLOADS_ROOT: (FILES_DIR, True),
    OUTPUTS_ROOT: (OUTPUTS_DIR, False),
    SKILLS_ROOT: (SKILLS_DIR, True),
}
_GENERATIONS: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset({UPLOADS_ROOT, OUTPUTS_ROOT}),
    frozenset({UPLOADS_ROOT, OUTPUTS_ROOT, SKILLS_ROOT}),
)
"""The sets of mounts containers were made with, oldest first: no other set is ours."""


def mount_problems(
    host: Mapping[str, Any], host_dir: Path, memory: Sequence[MemoryStoreMount] = ()
) -> tuple[MountState, list[str]]:
    """The container's resource mounts (from ``HostConfig``) and what is wrong with them.

    A container of an older generation (none at all, or no skills mount)
    is no problem; anything else must be exactly :func:`container_mounts` of
    ``host_dir`` and ``memory`` (or its older subset): no other bind, volume
    or tmpfs, no ``Binds``, the right sources and modes, every Memory Store
    of the spec.
    """
    expected = {
        **_EXPECTED,
        **{m.runtime_path: (f"{MEMORY_DIR}/{m.slug}", m.read_only) for m in memory},
    }
    problems: list[str] = []
    if host.get("Binds"):
        problems.append(f"bind mounts {host.get('Binds')!r}")
    mounts = host.get("Mounts") or []
    if not isinstance(mounts, list):
        return MountState.none(), [f"mounts {mounts!r}"]
    found: set[str] = set()
    for mount in mounts:
        target = mount.get("Target") if isinstance(mount, Mapping) else None
        wanted = expected.get(str(target))
        if not isinstance(mount, Mapping) or wanted is None or target in found:
            problems.append(f"mount {mount!r}")
            continue
        found.add(str(target))
        name, read_only = wanted
        source = mount.get("Source")
        if mount.get("Type") != "bind" or not isinstance(source, str):
            problems.append(f"{target} is not a bind mount of a host directory")
        elif canonical_path(source) != canonical_path(host_dir / name):
            problems.append(f"{target} is bound from {source}, not from {host_dir / name}")
        if bool(mount.get("ReadOnly")) is not read_only:
            mode = "read-only" if read_only else "writable"
            problems.append(f"{target} is not {mode}")
    memory_found = frozenset(found - set(_EXPECTED))
    if frozenset(found - memory_found) not in _GENERATIONS:
        problems.append(f"the resource mounts {sorted(found)} are not a set mango makes")
    if found:
        problems.extend(
            f"the Memory Store mount {mount.runtime_path} is missing"
            for mount in memory
            if mount.runtime_path not in memory_found
        )
    state = MountState(
        uploads=UPLOADS_ROOT in found,
        outputs=OUTPUTS_ROOT in found,
        skills=SKILLS_ROOT in found,
        memory=memory_found,
    )
    return state, problems
