"""Fixtures of the Files store tests: a real S3 HTTP endpoint, and one store of each kind.

``s3_endpoint`` is moto's S3 server (``moto[server]``, a dev dependency) in a
subprocess on 127.0.0.1, started once per test session: real HTTP, real
SigV4-signed requests from obstore, nothing downloaded. Each test gets its
own bucket (``s3_bucket``), and ``aws_env`` puts dummy credentials in the
environment (always: without them the S3 client would look for instance
credentials, off this machine).

``file_store`` is the parametrized fixture the contract suite runs on: one
opened store per adapter. A future store adds itself to ``STORE_KINDS`` and
:func:`_open_store`, and the whole suite runs on it, with no fake involved.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from mango.app import SessionManager
from mango.app.session_files import SessionFiles
from mango.domain import MangoError
from mango.domain.files import FileStore
from mango.filestore import FileStoreKind, FileStoreSettings, open_file_store
from mango.local import LocalProvider
from mango.postgres import PostgresBindingStore

from .docker_sandboxes import docker_provider, make_session_files

STORE_KINDS = ("fs", "s3")

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "mango-test-key-id",
    "AWS_SECRET_ACCESS_KEY": "mango-test-secret-never-shown",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Dummy credentials moto accepts; the secret is looked for in outputs by the tests."""

_SERVER = """
import signal, sys
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
"""


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto S3 server running for the whole test session."""
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdout=subprocess.PIPE,
            stderr=sink,
            stdin=subprocess.DEVNULL,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            pytest.fail(f"moto did not start: {log.read_text(errors='replace')[-2000:]}")
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Dummy AWS credentials in this process's environment (read by the S3 client)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(AWS_TEST_ENV)


def make_bucket(endpoint: str) -> str:
    """Create a fresh bucket on the moto server and return its name."""
    name = f"mango-{uuid.uuid4().hex[:16]}"
    response = httpx.put(f"{endpoint}/{name}", timeout=30)
    assert response.status_code == 200, response.text
    return name


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """A bucket of this test's own on the moto server."""
    return make_bucket(s3_endpoint)


def store_settings(
    kind: str, tmp_path: Path, s3_endpoint: str | None, bucket: str | None
) -> FileStoreSettings:
    """The settings of a store of ``kind`` for one test."""
    if kind == "fs":
        return FileStoreSettings(kind=FileStoreKind.FS, directory=tmp_path / "blobs")
    assert s3_endpoint is not None
    return FileStoreSettings(
        kind=FileStoreKind.S3,
        s3_bucket=bucket,
        s3_prefix="deploy/one",
        s3_endpoint_url=s3_endpoint,
    )


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each Files store adapter."""
    kind: str = request.param
    return kind


@pytest.fixture
def file_store_settings(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> FileStoreSettings:
    """Settings of a fresh store of ``store_kind`` (its own directory or bucket)."""
    if store_kind == "fs":
        return store_settings("fs", tmp_path, None, None)
    endpoint: str = request.getfixturevalue("s3_endpoint")
    request.getfixturevalue("aws_env")
    return store_settings("s3", tmp_path, endpoint, make_bucket(endpoint))


@pytest.fixture
async def file_store(file_store_settings: FileStoreSettings) -> AsyncIterator[FileStore]:
    """An opened store of each kind, closed afterwards."""
    store = open_file_store(file_store_settings)
    try:
        yield store
    finally:
        await store.aclose()


def store_environ(settings: FileStoreSettings) -> dict[str, str]:
    """The ``MANGO_*`` (and AWS) environment that selects ``settings`` in a subprocess."""
    if settings.kind is FileStoreKind.FS:
        return {"MANGO_FILE_STORE": "fs", "MANGO_FILE_STORE_DIR": str(settings.directory)}
    assert settings.s3_bucket is not None
    return {
        "MANGO_FILE_STORE": "s3",
        "MANGO_S3_BUCKET": settings.s3_bucket,
        "MANGO_S3_PREFIX": settings.s3_prefix,
        "MANGO_S3_ENDPOINT_URL": settings.s3_endpoint_url or "",
        **AWS_TEST_ENV,
    }


@pytest.fixture
def tamper(file_store_settings: FileStoreSettings) -> Callable[[str, bytes], Awaitable[None]]:
    """Replace a blob's bytes behind the store's back, in its backend."""

    async def replace(key: str, data: bytes) -> None:
        if file_store_settings.kind is FileStoreKind.FS:
            assert file_store_settings.directory is not None
            path = file_store_settings.directory / key
            path.chmod(0o644)
            path.write_bytes(data)
            return
        import obstore
        from obstore.store import S3Store

        raw = S3Store(
            file_store_settings.s3_bucket,
            prefix=file_store_settings.s3_prefix,
            endpoint=file_store_settings.s3_endpoint_url,
            client_options={"allow_http": True},
        )
        await obstore.put_async(raw, key, data)

    return replace


# ------------------------------------------------ Session resources and outputs


@pytest.fixture
async def session_files(store: PostgresBindingStore, file_store: FileStore) -> SessionFiles:
    """SessionFiles on the test's database and a store of each kind."""
    return make_session_files(store, file_store, await store.deployment_namespace())


@pytest.fixture
async def docker_manager(
    store: PostgresBindingStore, session_files: SessionFiles, tmp_path: Path
) -> AsyncIterator[SessionManager]:
    """A SessionManager on Docker with SessionFiles; every Session it made is deleted after."""
    provider = await docker_provider(await store.deployment_namespace(), tmp_path / "docker")
    manager = SessionManager(provider, store, files=session_files)  # type: ignore[arg-type]
    try:
        yield manager
    finally:
        for record in await store.list_sessions(1000):
            try:
                await manager.delete_session(record.session_id)
            except MangoError:
                continue  # a test that broke a Session on purpose leaves it to the daemon cleanup
        await manager.aclose()


@pytest.fixture
async def local_manager(
    store: PostgresBindingStore, session_files: SessionFiles, tmp_path: Path
) -> AsyncIterator[SessionManager]:
    """A SessionManager on the local provider (no resource capability) with SessionFiles."""
    manager = SessionManager(LocalProvider(tmp_path / "local"), store, files=session_files)
    try:
        yield manager
    finally:
        await manager.aclose()
