"""The resource mounts of a sandbox: provider-owned host directories bound into its container.

Each sandbox's host directory (``<resource dir>/mango-<32 hex>/``, 0700,
see :mod:`mango_provider_docker.layout`) holds::

    files/     0755  -> /mnt/session/uploads  read-only   File Resource copies (0444)
    outputs/   0777  -> /mnt/session/outputs  read-write  what the sandbox publishes
    skills/    0755  -> /workspace/skills     read-only   pinned skill trees (0444 files)
    state/     0700  never mounted                        markers, verified archives, the lock

Trust boundary: the container sees only the three mounted directories. The
uploads and skills mounts are read-only in the kernel (bind mounts with
``ReadOnly``), so no process in the container, root included, can change,
add or remove a File Resource or a skill file; only the worker writes there.
The outputs directory is the sandbox's to write (0777: whichever user
the image runs as); its content is untrusted and is only ever read through
the Engine's archive API (never followed on the host) when it is published.
The state directory, with the markers that say which resource a copy belongs
to, is out of the container's reach.

Containers created before these mounts existed lack them: those made before
the resource mounts have none, those made before the skills mount have the
first two. They keep working for commands and files, and :class:`MountState`
reports what they have so that File Resources, outputs and skills fail
closed (a :class:`PermanentError` saying to recreate the Session's sandbox)
instead of pretending. Attach and adoption read the mounts from the
container's configuration: exactly the binds of one of those generations,
from this sandbox's own host directory, in these modes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mango.provider import OUTPUTS_ROOT, SKILLS_ROOT, UPLOADS_ROOT, PermanentError
from mango.provider.hostdirs import canonical_path, host_errors
from mango_provider_docker.layout import RESOURCE_DIR_ENV

__all__ = [
    "FILES_DIR",
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
STATE_DIR = "state"
_MODES = {FILES_DIR: 0o755, OUTPUTS_DIR: 0o777, SKILLS_DIR: 0o755, STATE_DIR: 0o700}


@attrs.frozen
class MountState:
    """Which resource mounts a container has (all three, for every container made today)."""

    uploads: bool = True
    outputs: bool = True
    skills: bool = True

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


def ensure_mount_dirs(host_dir: Path) -> None:
    """Create-if-absent ``files/``, ``outputs/``, ``skills/``, ``state/`` in their modes.

    Whatever the umask: each is chmod-ed after it is made.
    """
    with host_errors(host_dir.parent, setting=RESOURCE_DIR_ENV, what="cannot create directories"):
        for name, mode in _MODES.items():
            path = host_dir / name
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=mode)
            if path.is_symlink() or not path.is_dir():
                raise PermanentError(f"{path} is not a plain directory")
            path.chmod(mode)


def container_mounts(host_dir: Path) -> list[dict[str, Any]]:
    """``HostConfig.Mounts`` of a new container: the three binds, from ``host_dir``."""
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


def mount_problems(host: Mapping[str, Any], host_dir: Path) -> tuple[MountState, list[str]]:
    """The container's resource mounts (from ``HostConfig``) and what is wrong with them.

    A container of an older generation (none at all, or no skills mount)
    is no problem; anything else must be exactly :func:`container_mounts` of
    ``host_dir`` (or its older subset): no other bind, volume or tmpfs, no
    ``Binds``, the right sources and modes.
    """
    problems: list[str] = []
    if host.get("Binds"):
        problems.append(f"bind mounts {host.get('Binds')!r}")
    mounts = host.get("Mounts") or []
    if not isinstance(mounts, list):
        return MountState.none(), [f"mounts {mounts!r}"]
    found: set[str] = set()
    for mount in mounts:
        target = mount.get("Target") if isinstance(mount, Mapping) else None
        expected = _EXPECTED.get(str(target))
        if not isinstance(mount, Mapping) or expected is None or target in found:
            problems.append(f"mount {mount!r}")
            continue
        found.add(str(target))
        name, read_only = expected
        source = mount.get("Source")
        if mount.get("Type") != "bind" or not isinstance(source, str):
            problems.append(f"{target} is not a bind mount of a host directory")
        elif canonical_path(source) != canonical_path(host_dir / name):
            problems.append(f"{target} is bound from {source}, not from {host_dir / name}")
        if bool(mount.get("ReadOnly")) is not read_only:
            mode = "read-only" if read_only else "writable"
            problems.append(f"{target} is not {mode}")
    if frozenset(found) not in _GENERATIONS:
        problems.append(f"the resource mounts {sorted(found)} are not a set mango makes")
    state = MountState(
        uploads=UPLOADS_ROOT in found, outputs=OUTPUTS_ROOT in found, skills=SKILLS_ROOT in found
    )
    return state, problems
