"""The offline conformance target of the Docker provider: the local daemon and test images.

The lifecycle checks run on the busybox image of ``.ci/make-test-image``.
The ``package-setup`` checks run on an image made from the Debian image of
``.ci/make-debian-image`` with the packages of :data:`APT_PACKAGES` and
:data:`PIP_PACKAGES` baked in as ``file:`` sources
(:func:`~mango_provider_docker.testimages.baked_sources`): real ``apt-get``
and ``pip`` against real ``.deb`` files and wheels, with no network at all
(the testbed's package source has no hosts). The ``exposed-ports`` check
serves on :data:`CONFORMANCE_PORT`, which the target's provider publishes on
127.0.0.1 for its ``bridge`` sandboxes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from mango.provider import (
    ConfigurationError,
    ConformanceTestbed,
    NetworkMode,
    PackagePlan,
    PackageSource,
    PortTestbed,
    ProviderUnavailable,
)
from mango.provider.ownership import derived_namespace
from mango_provider_docker.engine import Engine
from mango_provider_docker.provider import DockerProvider
from mango_provider_docker.testimages import BASE_IMAGE, baked_sources, derived_image

__all__ = [
    "APT_PACKAGES",
    "CONFORMANCE_IMAGE",
    "CONFORMANCE_IMAGE_ENV",
    "CONFORMANCE_PORT",
    "MISSING_PACKAGE",
    "PACKAGES_BASE_ENV",
    "PACKAGES_REPO",
    "PIP_PACKAGES",
    "PORT_TESTBED",
    "open_conformance_provider",
    "open_conformance_testbed",
]

CONFORMANCE_IMAGE = "mango-test-busybox:latest"
"""The image the target uses: the busybox rootfs that ``.ci/make-test-image`` imports."""
CONFORMANCE_IMAGE_ENV = "MANGO_CONFORMANCE_DOCKER_IMAGE"
"""Overrides :data:`CONFORMANCE_IMAGE`."""
PACKAGES_BASE_ENV = "MANGO_CONFORMANCE_DOCKER_PACKAGES_BASE"
"""Overrides the base of the package image (default: ``mango-test-debian:latest``)."""
PACKAGES_REPO = "mango-test-packages"
"""The repository of the package image (tagged by a hash of its base and files)."""
APT_PACKAGES = ("mango-probe-first", "mango-probe-second")
PIP_PACKAGES = ("mango-probe-pip",)
MISSING_PACKAGE = "mango-probe-missing"
"""A package the image's apt source does not have."""
CONFORMANCE_PORT = 8080
"""The port the ``exposed-ports`` check serves on (published for bridge sandboxes)."""
PORT_TESTBED = PortTestbed(port=CONFORMANCE_PORT, network=NetworkMode.BRIDGE)
"""The ``exposed-ports`` part of the testbed."""


@contextlib.asynccontextmanager
async def open_conformance_provider(scratch_dir: Path) -> AsyncIterator[DockerProvider]:
    """Yield a fresh :class:`DockerProvider` on the local daemon, never pulling.

    Host directories live under ``scratch_dir / "docker"``; entering again
    with the same directory gives a provider that attaches to what earlier
    ones created. The namespace is derived from ``scratch_dir`` (fixed for the
    run, different between runs). Raises :class:`ProviderUnavailable` if no
    daemon answers and :class:`ConfigurationError` if the test image is missing.
    """
    image = os.environ.get(CONFORMANCE_IMAGE_ENV, "").strip() or CONFORMANCE_IMAGE
    provider = DockerProvider(
        Path(scratch_dir) / "docker",
        namespace=derived_namespace("conformance", os.fspath(scratch_dir)),
        image=image,
        host=os.environ.get("DOCKER_HOST", "").strip() or None,
        pull_missing_images=False,
        publish_ports=(CONFORMANCE_PORT,),
    )
    try:
        try:
            await provider.health()
        except ProviderUnavailable as exc:
            raise ProviderUnavailable(
                f"the docker conformance target needs a running Docker Engine: {exc}",
                hint="start one (for example .ci/start-dockerd) or set DOCKER_HOST",
            ) from exc
        if not await provider.engine.image_exists(image):
            raise ConfigurationError(
                f"the docker conformance target needs the image {image!r}",
                hint=f"build it with .ci/make-test-image, or set {CONFORMANCE_IMAGE_ENV}",
            )
        yield provider
    finally:
        await provider.aclose()


@contextlib.asynccontextmanager
async def open_conformance_testbed(scratch_dir: Path) -> AsyncIterator[ConformanceTestbed]:
    """The package source of the ``package-setup`` checks: an image with them baked in.

    The image is made from the Debian base once (then found by its tag).
    Raises :class:`ConfigurationError` if the base image is missing.
    """
    del scratch_dir  # the image is the same for every run
    base = os.environ.get(PACKAGES_BASE_ENV, "").strip() or BASE_IMAGE
    engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
    try:
        image = await derived_image(
            engine, baked_sources(APT_PACKAGES, PIP_PACKAGES), base=base, repo=PACKAGES_REPO
        )
    finally:
        await engine.aclose()
    yield ConformanceTestbed(
        packages=PackageSource(
            plan=PackagePlan(apt=APT_PACKAGES, pip=PIP_PACKAGES),
            failing=PackagePlan(apt=(APT_PACKAGES[0], MISSING_PACKAGE)),
            missing=MISSING_PACKAGE,
            image=image,
        ),
        ports=PORT_TESTBED,
    )
