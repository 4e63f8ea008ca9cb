"""Fixtures for the Docker provider's tests: a real daemon and a busybox image built here.

``docker_engine`` connects to the daemon (``DOCKER_HOST`` or the default
socket). When none answers, tests that need it are skipped -- or fail, with
``MANGO_REQUIRE_DOCKER=1`` (CI sets it). ``test_image`` builds
``mango-test-busybox:pytest`` through the Engine API's image import from a
root filesystem tar made here with :mod:`tarfile` from the host's static
``/bin/busybox`` (the layout of ``.ci/make-test-image``); no registry is
needed, nothing is pulled.

Every container a test creates carries the label ``io.mango.test-run=<id>``;
at the end of the session every container with this run's id is removed.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mango.domain.errors import MangoError
from mango.domain.values import SandboxSpec
from mango.provider.ownership import Ownership
from mango_provider_docker import DockerProvider, DockerSandbox, Engine

TEST_IMAGE_REPO = "mango-test-busybox"
TEST_IMAGE_TAG = "pytest"
TEST_IMAGE = f"{TEST_IMAGE_REPO}:{TEST_IMAGE_TAG}"
RUN_LABEL = "io.mango.test-run"
RUN_ID = uuid.uuid4().hex[:16]
RUN_LABELS = {RUN_LABEL: RUN_ID}
NAMESPACE = f"test-{RUN_ID}"
"""The deployment namespace of this run's providers (unless a test gives another)."""
OWNERSHIP = Ownership("docker", NAMESPACE)
BUSYBOX = Path("/bin/busybox")
REQUIRE_ENV = "MANGO_REQUIRE_DOCKER"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV, "") == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1)")
    pytest.skip(reason)


def docker_host() -> str | None:
    """The daemon the tests use: ``DOCKER_HOST`` or aiodocker's default."""
    return os.environ.get("DOCKER_HOST", "").strip() or None


@pytest.fixture(scope="session")
async def docker_engine() -> AsyncIterator[Engine]:
    """A connected Engine client; skips (or fails) when no daemon answers."""
    engine = Engine(docker_host())
    try:
        await engine.client()
    except MangoError as exc:
        await engine.aclose()
        _unavailable(f"no Docker Engine: {exc}")
    try:
        yield engine
    finally:
        try:
            for container in await engine.list_containers(RUN_LABELS):
                await engine.remove_container(str(container["Id"]))
        finally:
            await engine.aclose()


def busybox_rootfs(busybox: Path = BUSYBOX) -> bytes:
    """A root filesystem tar: static busybox, one symlink per applet, a minimal /etc."""
    applets = subprocess.run(
        [str(busybox), "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    buffer = io.BytesIO()

    def add(
        name: str, kind: bytes, *, mode: int = 0o755, data: bytes = b"", link: str = ""
    ) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = mode
        info.linkname = link
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data) if data else None)

    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for directory in ("bin", "etc", "root", "workspace", "dev", "proc", "sys", "usr", "var"):
            add(directory, tarfile.DIRTYPE)
        add("tmp", tarfile.DIRTYPE, mode=0o1777)
        add("var/tmp", tarfile.DIRTYPE, mode=0o1777)
        add("bin/busybox", tarfile.REGTYPE, data=busybox.read_bytes())
        for applet in applets:
            if applet != "busybox":
                add(f"bin/{applet}", tarfile.SYMTYPE, link="busybox")
        add("sbin", tarfile.SYMTYPE, link="bin")
        add("usr/bin", tarfile.SYMTYPE, link="../bin")
        add("usr/sbin", tarfile.SYMTYPE, link="../bin")
        add(
            "etc/passwd",
            tarfile.REGTYPE,
            mode=0o644,
            data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        )
        add("etc/group", tarfile.REGTYPE, mode=0o644, data=b"root:x:0:\nnogroup:x:65534:\n")
    return buffer.getvalue()


@pytest.fixture(scope="session")
async def test_image(docker_engine: Engine) -> str:
    """``mango-test-busybox:pytest``, imported once if it is not present."""
    if not await docker_engine.image_exists(TEST_IMAGE):
        if shutil.which(str(BUSYBOX)) is None:
            _unavailable(f"{BUSYBOX} (busybox-static) is needed to build {TEST_IMAGE}")
        await import_rootfs(docker_engine, busybox_rootfs(), TEST_IMAGE_REPO, TEST_IMAGE_TAG)
    return TEST_IMAGE


async def import_rootfs(engine: Engine, rootfs: bytes, repo: str, tag: str) -> None:
    """``POST /images/create?fromSrc=-``: an image from a root filesystem tar, no registry."""
    docker = await engine.client()
    query = [("fromSrc", "-"), ("repo", repo), ("tag", tag), ("changes", 'CMD ["/bin/sh"]')]
    url = f"{docker.docker_host}/{docker.api_version}/images/create"
    async with docker.session.post(
        url, params=query, data=io.BytesIO(rootfs), headers={"Content-Type": "application/x-tar"}
    ) as response:
        body = await response.read()
    if response.status >= 400 or b'"error"' in body:
        raise RuntimeError(f"importing {repo}:{tag} failed: {body[:500]!r}")


def make_provider(resource_dir: Path, image: str, **options: object) -> DockerProvider:
    """A provider over the test daemon whose containers carry this run's label.

    Its namespace is this run's :data:`NAMESPACE` unless ``namespace`` is given.
    """
    options.setdefault("namespace", NAMESPACE)
    return DockerProvider(
        resource_dir,
        image=image,
        host=docker_host(),
        extra_labels=RUN_LABELS,
        pull_missing_images=False,
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def resource_dir(tmp_path: Path) -> Path:
    """The provider-owned host directory of one test."""
    return tmp_path / "resources"


@pytest.fixture
async def provider(
    docker_engine: Engine, test_image: str, resource_dir: Path
) -> AsyncIterator[DockerProvider]:
    """A fresh provider on the test image; closed afterwards."""
    made = make_provider(resource_dir, test_image)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
def session_key(request: pytest.FixtureRequest) -> str:
    """A Session key unique to this test."""
    return f"test-{request.node.name[:80]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def sandbox(provider: DockerProvider, session_key: str) -> AsyncIterator[DockerSandbox]:
    """A created sandbox, destroyed afterwards."""
    made = await provider.create(session_key, SandboxSpec(timeout=60.0))
    try:
        yield made
    finally:
        await made.destroy()
