"""The offline conformance target of the Docker provider: the local daemon and a test image."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from mango.provider import ConfigurationError, ProviderUnavailable
from mango.provider.ownership import derived_namespace
from mango_provider_docker.provider import DockerProvider

__all__ = ["CONFORMANCE_IMAGE", "CONFORMANCE_IMAGE_ENV", "open_conformance_provider"]

CONFORMANCE_IMAGE = "mango-test-busybox:latest"
"""The image the target uses: the busybox rootfs that ``.ci/make-test-image`` imports."""
CONFORMANCE_IMAGE_ENV = "MANGO_CONFORMANCE_DOCKER_IMAGE"
"""Overrides :data:`CONFORMANCE_IMAGE`."""


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
