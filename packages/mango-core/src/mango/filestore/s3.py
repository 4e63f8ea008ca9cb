"""The S3-compatible Files store, on obstore (imported only when this store is selected).

obstore is the Python binding of the Rust ``object_store`` crate: async
calls, streaming multipart uploads from an async iterator, streamed
downloads, its own retries with backoff, and no botocore. Credentials come
from the environment as AWS tools read them (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` /
``AWS_DEFAULT_REGION``, web identity, container and instance credentials);
mango never reads, stores or prints them.

A put streams through a :class:`~mango.domain.files.ContentCheck` into a
multipart upload (8 MiB parts, two in flight, so memory stays near 16 MiB
whatever the size); an error or a mismatch raised while the parts are read
aborts the upload, so no object appears. Then a HEAD reads the stored size
back. A put killed outright leaves an incomplete multipart upload, which S3
keeps out of every listing; a bucket lifecycle rule
(``AbortIncompleteMultipartUpload``) removes those.

Every obstore call is its blocking form, run in a worker thread of the
event loop's executor, never its ``*_async`` form. An async call completes
on one of obstore's tokio threads, which takes the GIL to hand the result to
the loop; if the interpreter starts to finalize meanwhile (a short command
exiting as soon as its last await returns), CPython 3.11 to 3.13 ends that
thread inside the Rust frames holding it, and the process aborts ("Fatal
Python error: PyGILState_Release"). A blocking call leaves the GIL only on
the thread that called it, a thread Python starts and joins; a cancelled
caller waits for its call to return (bounded by the client timeouts).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterator
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import obstore
from obstore.exceptions import (
    BaseError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from obstore.store import S3Store

from mango.domain.errors import (
    ConfigurationError,
    ContentMismatch,
    FileStoreUnavailable,
    InvalidInput,
    MangoError,
)
from mango.domain.files import BlobEntry, BlobInfo, ContentCheck, validate_blob_key

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

__all__ = ["PART_BYTES", "READ_CHUNK_BYTES", "S3FileStore"]

T = TypeVar("T")

PART_BYTES = 8 * 1024 * 1024
"""Multipart upload part size (S3 allows 10 000 parts: about 78 GiB per blob)."""
_PARTS_IN_FLIGHT = 2
READ_CHUNK_BYTES = 1024 * 1024
"""Downloads are handed on in chunks of about this size."""
_RETRY: RetryConfig = {
    "max_retries": 4,
    "retry_timeout": timedelta(seconds=30),
    "backoff": {
        "init_backoff": timedelta(milliseconds=100),
        "max_backoff": timedelta(seconds=5),
        "base": 2,
    },
}


def _first_line(exc: BaseException) -> str:
    # obstore appends a multi-line "Debug source" dump; its first line says what happened.
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


async def _blocking(
    function: Callable[[], T], *, on_cancel: Callable[[], object] | None = None
) -> T:
    """Run a blocking obstore call in a worker thread; a cancelled caller waits for it.

    ``on_cancel`` runs first, on the loop, to make the call end sooner.
    """
    future = asyncio.get_running_loop().run_in_executor(None, function)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if on_cancel is not None:
            on_cancel()
        await asyncio.wait({future})
        if not future.cancelled():
            future.exception()  # retrieved: the caller has gone
        raise


class _Stopped(Exception):
    """The put's caller was cancelled: the source ends with this, so the upload aborts."""


class _Pull:
    """A blocking iterator over an async one, for ``obstore.put`` in a worker thread.

    Each ``next`` runs one ``anext`` as a task on ``loop`` and waits for it.
    :meth:`stop` (on the loop) cancels the one in progress and fails the
    rest; :meth:`settled` waits until none runs, so the source can be closed.
    """

    def __init__(self, source: AsyncIterator[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._source = source
        self._loop = loop
        self._stopped = False
        self._task: asyncio.Task[bytes | None] | None = None

    def __iter__(self) -> _Pull:
        return self

    def __next__(self) -> bytes:
        handed: concurrent.futures.Future[bytes | None] = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._start, handed)
        chunk = handed.result()
        if chunk is None:
            raise StopIteration
        return chunk

    async def _next(self) -> bytes | None:
        try:
            return await anext(self._source)
        except StopAsyncIteration:
            return None

    def _start(self, handed: concurrent.futures.Future[bytes | None]) -> None:
        if self._stopped:
            handed.set_exception(_Stopped("the upload was cancelled"))
            return
        task = self._task = self._loop.create_task(self._next())

        def hand(done: asyncio.Task[bytes | None]) -> None:
            if done.cancelled():
                handed.set_exception(_Stopped("the upload was cancelled"))
            elif (exc := done.exception()) is not None:
                handed.set_exception(exc)
            else:
                handed.set_result(done.result())

        task.add_done_callback(hand)

    def stop(self) -> None:
        """Fail the ``next`` in progress and every later one (call it on the loop)."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    async def settled(self) -> None:
        """Return once no ``anext`` of the source runs."""
        if self._task is not None:
            await asyncio.wait({self._task})


class S3FileStore:
    """A :class:`~mango.domain.files.FileStore` in an S3 bucket, below an optional prefix."""

    def __init__(self, bucket: str, *, prefix: str = "", endpoint_url: str | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        options: ClientConfig = {
            "connect_timeout": timedelta(seconds=10),
            "read_timeout": timedelta(seconds=60),
            # A whole request, a long download included: stalls are caught by read_timeout.
            "timeout": timedelta(hours=6),
        }
        config: dict[str, Any] = {}
        if endpoint_url is not None:
            config["endpoint"] = endpoint_url
            options["allow_http"] = endpoint_url.startswith("http://")
        try:
            self._store = S3Store(
                bucket,
                prefix=self.prefix or None,
                client_options=options,
                retry_config=_RETRY,
                **config,
            )
        except BaseError as exc:
            raise ConfigurationError(
                f"the S3 file store cannot be configured: {_first_line(exc)}",
                hint="check MANGO_S3_BUCKET, MANGO_S3_ENDPOINT_URL and the AWS_* settings",
            ) from None

    @property
    def location(self) -> str:
        """``s3://bucket/prefix``, and the endpoint when it is not AWS's."""
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return where if self.endpoint_url is None else f"{where} at {self.endpoint_url}"

    def __repr__(self) -> str:
        return f"S3FileStore({self.location!r})"

    # ------------------------------------------------------------------ errors

    def _raise(self, exc: BaseException, action: str) -> NoReturn:
        message = _first_line(exc)
        if "NoSuchBucket" in str(exc):
            raise ConfigurationError(
                f"the S3 bucket {self.bucket!r} does not exist ({self.location})",
                hint="create it, or set MANGO_S3_BUCKET to an existing bucket",
            ) from None
        if isinstance(exc, PermissionDeniedError | UnauthenticatedError):
            raise ConfigurationError(
                f"S3 refused mango's credentials while {action} ({self.location}): {message}",
                hint="check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the role) and the "
                "bucket policy",
            ) from None
        raise FileStoreUnavailable(
            f"the S3 file store ({self.location}) failed while {action}: {message}",
            hint="check that the endpoint is reachable, then retry",
        ) from None

    @contextlib.contextmanager
    def _translated(self, action: str, *, missing: str | None = None) -> Iterator[None]:
        """obstore errors as mango errors; with ``missing``, a 404 is FileNotFoundError."""
        try:
            yield
        except MangoError:
            raise
        except (FileNotFoundError, NotFoundError) as exc:  # obstore raises the builtin for 404s
            if missing is not None and "NoSuchBucket" not in str(exc):
                raise FileNotFoundError(2, "no such blob", missing) from None
            self._raise(exc, action)
        except BaseError as exc:
            self._raise(exc, action)

    # ------------------------------------------------------------------ operations

    async def put(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        size: int | None = None,
        sha256: str | None = None,
    ) -> BlobInfo:
        """Stream ``chunks`` into a multipart upload through the check; HEAD the result."""
        validate_blob_key(key)
        check = ContentCheck(f"the content for {key!r}", size=size, sha256=sha256)

        async def checked() -> AsyncGenerator[bytes, None]:
            async for chunk in chunks:
                check.update(chunk)
                yield chunk
            check.finish()  # raising here aborts the upload before it completes

        source = checked()
        pull = _Pull(source, asyncio.get_running_loop())
        try:
            with self._translated(f"storing {key!r}"):
                await _blocking(
                    functools.partial(
                        obstore.put,
                        self._store,
                        key,
                        pull,
                        use_multipart=True,
                        chunk_size=PART_BYTES,
                        max_concurrency=_PARTS_IN_FLIGHT,
                    ),
                    on_cancel=pull.stop,
                )
        finally:
            pull.stop()
            await pull.settled()
            await source.aclose()
        info = check.finish()
        with self._translated(f"checking {key!r}"):
            meta = await _blocking(functools.partial(obstore.head, self._store, key))
        if meta["size"] != info.size:
            with contextlib.suppress(BaseError):
                await _blocking(functools.partial(obstore.delete, self._store, key))
            raise ContentMismatch(
                f"S3 ({self.location}) kept {meta['size']} of the {info.size} bytes of {key!r}",
                expected_size=info.size,
                size=meta["size"],
                expected_sha256=info.sha256,
            )
        return info

    @contextlib.asynccontextmanager
    async def open(
        self, key: str, *, size: int | None = None, sha256: str | None = None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """GET the object and hand its body on in chunks, verified as they pass."""
        validate_blob_key(key)
        check = ContentCheck(
            f"the stored content of {key!r}", size=size, sha256=sha256, digest=False
        )
        with self._translated(f"reading {key!r}", missing=key):
            result = await _blocking(functools.partial(obstore.get, self._store, key))
        stream = result.stream(min_chunk_size=READ_CHUNK_BYTES)

        async def verified() -> AsyncGenerator[bytes, None]:
            while True:
                with self._translated(f"reading {key!r}"):
                    chunk = await _blocking(functools.partial(next, stream, None))
                if chunk is None:
                    break
                check.update(chunk)
                yield chunk
            check.finish()

        chunks = verified()
        try:
            yield chunks
        finally:
            await chunks.aclose()

    async def delete(self, key: str) -> bool:
        """HEAD, then DELETE (S3 answers a delete the same whether or not the key existed)."""
        validate_blob_key(key)
        with self._translated(f"deleting {key!r}"):
            try:
                await _blocking(functools.partial(obstore.head, self._store, key))
            except FileNotFoundError as exc:
                if "NoSuchBucket" in str(exc):
                    raise
                return False
            await _blocking(functools.partial(obstore.delete, self._store, key))
        return True

    async def scan(self, prefix: str) -> AsyncIterator[BlobEntry]:
        """List the objects below ``prefix``, a page at a time."""
        if prefix:
            if not prefix.endswith("/"):
                raise InvalidInput(f"scan prefix {prefix!r} must end with '/'")
            validate_blob_key(prefix[:-1])
        pages = obstore.list(self._store, prefix=prefix or None, chunk_size=1000)
        while True:
            with self._translated("listing blobs"):
                page = await _blocking(functools.partial(next, pages, None))
            if page is None:
                return
            for meta in page:
                yield BlobEntry(meta["path"], meta["size"], meta["last_modified"].astimezone(UTC))

    async def discard_incomplete(self, older_than: timedelta) -> int:
        """0: incomplete multipart uploads are S3's to expire (a bucket lifecycle rule)."""
        del older_than  # S3 lists no incomplete upload as an object, so none is in reach
        return 0

    async def aclose(self) -> None:
        """Nothing to release: obstore's connection pool goes with the store object.

        Nor any thread to wait for: every call above has returned from its
        worker thread before it returns.
        """
