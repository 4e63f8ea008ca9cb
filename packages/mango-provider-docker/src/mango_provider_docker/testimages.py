"""Test images with package sources configured, made from a base image without a registry.

The package tests and the conformance target need an image whose ``apt`` and
``pip`` find the test packages of :mod:`mango_provider_docker.repository`:
:func:`derived_image` adds files to a base image (by creating a container that
never starts, putting the files in with the archive API and committing it),
tagged by a hash of the base image and the files, so it is made once and
found again by every later run.

* :func:`baked_sources` -- the repositories inside the image, as ``file:``
  sources (the offline conformance target: no network at all);
* :func:`served_sources` -- source lines for repositories served over HTTP
  at ``base_url`` (the package tests serve them on the Docker bridge).
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import tarfile
from collections.abc import Iterable, Mapping

from mango.provider import ConfigurationError
from mango_provider_docker.engine import Engine
from mango_provider_docker.repository import apt_repository, pip_repository

__all__ = [
    "BASE_IMAGE",
    "BASE_IMAGE_HINT",
    "PACKAGES_DIR",
    "baked_sources",
    "bridge_gateway",
    "derived_image",
    "served_sources",
]

BASE_IMAGE = "mango-test-debian:latest"
"""A minimal Debian with apt, python3 and pip, and no package source (``.ci/make-debian-image``)."""
BASE_IMAGE_HINT = "build it with .ci/make-debian-image (debootstrap once, then cached)"
PACKAGES_DIR = "/srv/mango-packages"
"""Where :func:`baked_sources` puts the repositories inside the image."""
_SOURCES = "etc/apt/sources.list.d/mango-tests.list"
_JSON = {"Content-Type": "application/json"}


def baked_sources(apt: Iterable[str], pip: Iterable[str]) -> dict[str, bytes]:
    """The files of an image whose apt and pip install ``apt`` and ``pip`` from inside it."""
    files = {
        f"{PACKAGES_DIR.lstrip('/')}/apt/{path}": data for path, data in apt_repository(apt).items()
    }
    files.update(
        {
            f"{PACKAGES_DIR.lstrip('/')}/pip/{path}": data
            for path, data in pip_repository(pip).items()
        }
    )
    files[_SOURCES] = f"deb [trusted=yes] file:{PACKAGES_DIR}/apt ./\n".encode()
    files["etc/pip.conf"] = (
        f"[global]\nno-index = true\nfind-links = {PACKAGES_DIR}/pip/wheels\n".encode()
    )
    return files


def served_sources(base_url: str, host: str) -> dict[str, bytes]:
    """Source files for repositories served at ``base_url``/apt and ``base_url``/pip."""
    return {
        _SOURCES: f"deb [trusted=yes] {base_url}/apt/ ./\n".encode(),
        "etc/pip.conf": (
            f"[global]\nindex-url = {base_url}/pip/simple/\ntrusted-host = {host}\n"
            "disable-pip-version-check = true\n"
        ).encode(),
    }


def _tar(files: Mapping[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


async def bridge_gateway(engine: Engine) -> str:
    """The host's address on the Engine's default bridge (what containers reach it by).

    The network's IPv4 ``Gateway`` if the Engine lists one, else the first
    host address of its subnet (where dockerd puts the bridge by default).
    """
    _, _, body = await engine.call("inspect the bridge network", "GET", "networks/bridge")
    for config in (json.loads(body).get("IPAM") or {}).get("Config") or []:
        gateway, subnet = config.get("Gateway"), config.get("Subnet")
        if isinstance(gateway, str) and gateway.count(".") == 3:
            return gateway
        if isinstance(subnet, str) and subnet.count(".") == 3:
            return str(next(ipaddress.ip_network(subnet, strict=False).hosts()))
    raise ConfigurationError("the Docker Engine's bridge network has no IPv4 subnet")


async def derived_image(
    engine: Engine, files: Mapping[str, bytes], *, base: str = BASE_IMAGE, repo: str
) -> str:
    """``base`` with ``files`` (path below ``/`` -> bytes) added, as ``repo:<hash>``; made once.

    Raises :class:`ConfigurationError` if ``base`` is not on the Engine.
    """
    _, _, body = await engine.call(
        f"inspect image {base}", "GET", f"images/{base}/json", expected={404}
    )
    document = json.loads(body) if body else {}
    base_id = document.get("Id") if isinstance(document, dict) else None
    if not isinstance(base_id, str):
        raise ConfigurationError(
            f"the image {base!r} is not on the Docker Engine", hint=BASE_IMAGE_HINT
        )
    archive = _tar(files)
    tag = hashlib.sha256(base_id.encode() + archive).hexdigest()[:16]
    image = f"{repo}:{tag}"
    if await engine.image_exists(image):
        return image
    config = {"Image": base_id, "Cmd": ["/bin/sh"], "HostConfig": {"NetworkMode": "none"}}
    name = f"{repo.replace('/', '-')}-build-{tag}"
    container = await engine.create_container(name, config)
    if container is None:  # left by a build that crashed: it never started, so remove it
        await engine.remove_container(name)
        container = await engine.create_container(name, config)
    if container is None:
        raise ConfigurationError(f"{image} is being built by another run at the same time")
    try:
        await engine.put_archive(container, "/", archive)
        await engine.call(
            f"commit {image}",
            "POST",
            "commit",
            params={"container": container, "repo": repo, "tag": tag},
            data=json.dumps({"Cmd": ["/bin/sh"]}).encode(),
            headers=_JSON,
        )
    finally:
        await engine.remove_container(container)
    return image
