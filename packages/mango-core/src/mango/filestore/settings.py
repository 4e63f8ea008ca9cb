"""Which Files store to use, from the environment, validated before anything opens.

* ``MANGO_FILE_STORE``: ``fs`` (default) or ``s3``;
* ``MANGO_FILE_STORE_DIR``: the filesystem store's directory (absolute;
  default ``<state dir>/files``);
* ``MANGO_S3_BUCKET`` (required for ``s3``), ``MANGO_S3_PREFIX`` (optional,
  keys go below it), ``MANGO_S3_ENDPOINT_URL`` (optional, an S3-compatible
  service; else ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` as the AWS
  tools read them; else AWS itself).

Credentials are never settings of mango: the S3 client reads ``AWS_*`` from
the environment itself, and nothing here holds, stores or prints them.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from mango.config import state_dir
from mango.domain.errors import ConfigurationError
from mango.domain.files import FileStore

__all__ = [
    "FILE_STORE_DIR_ENV",
    "FILE_STORE_ENV",
    "S3_BUCKET_ENV",
    "S3_ENDPOINT_URL_ENV",
    "S3_PREFIX_ENV",
    "FileStoreKind",
    "FileStoreSettings",
    "open_file_store",
]

FILE_STORE_ENV = "MANGO_FILE_STORE"
FILE_STORE_DIR_ENV = "MANGO_FILE_STORE_DIR"
S3_BUCKET_ENV = "MANGO_S3_BUCKET"
S3_PREFIX_ENV = "MANGO_S3_PREFIX"
S3_ENDPOINT_URL_ENV = "MANGO_S3_ENDPOINT_URL"

# S3's bucket naming rules (general purpose buckets): 3-63 of [a-z0-9.-], alphanumeric ends.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}\Z")
_MAX_PREFIX = 512


class FileStoreKind(enum.Enum):
    """The Files store adapters."""

    FS = "fs"
    S3 = "s3"


def _bucket(text: str) -> str:
    if not text:
        raise ConfigurationError(
            f"{FILE_STORE_ENV}=s3 needs {S3_BUCKET_ENV}",
            hint=f"set {S3_BUCKET_ENV} to the name of an existing bucket",
        )
    if not _BUCKET.match(text) or ".." in text:
        raise ConfigurationError(
            f"{S3_BUCKET_ENV} must be an S3 bucket name (3-63 lowercase letters, digits, '.' "
            f"or '-', starting and ending with a letter or digit), got {text[:80]!r}"
        )
    return text


def _prefix(text: str) -> str:
    prefix = text.strip("/")
    if not prefix:
        return ""
    if len(prefix) > _MAX_PREFIX or not all(
        _PREFIX_SEGMENT.match(segment) for segment in prefix.split("/")
    ):
        raise ConfigurationError(
            f"{S3_PREFIX_ENV} must be '/'-separated segments of letters, digits, '.', '_' and "
            f"'-', each starting with a letter or digit (at most {_MAX_PREFIX} characters), "
            f"got {text[:80]!r}"
        )
    return prefix


def _endpoint(env: Mapping[str, str]) -> str | None:
    """The endpoint: ``MANGO_S3_ENDPOINT_URL``, else the AWS tools' own variables."""
    for name in (S3_ENDPOINT_URL_ENV, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        text = env.get(name, "").strip()
        if text:
            return _checked_endpoint(name, text)
    return None


def _checked_endpoint(name: str, text: str) -> str:
    invalid = ConfigurationError(f"{name} must be an http:// or https:// URL, got {_shown(text)!r}")
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError for a malformed port
    except ValueError:
        raise invalid from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise invalid
    if parts.username is not None or parts.password is not None:
        # Never echoed: the user part may be a secret. Credentials belong in AWS_*.
        raise ConfigurationError(
            f"{name} must not carry credentials",
            hint="put them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead",
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(f"{name} must have no query or fragment, got {_shown(text)!r}")
    return text.rstrip("/")


def _shown(text: str) -> str:
    """``text`` without anything before an ``@`` (a user part is never echoed)."""
    return text.rsplit("@", 1)[-1][:80]


@attrs.frozen
class FileStoreSettings:
    """The selected Files store and its settings (no credential among them)."""

    kind: FileStoreKind = FileStoreKind.FS
    directory: Path | None = None
    """The filesystem store's root (``fs``)."""
    s3_bucket: str | None = None
    s3_prefix: str = ""
    s3_endpoint_url: str | None = None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, state: Path | None = None
    ) -> FileStoreSettings:
        """Read and validate; :class:`ConfigurationError` names the variable at fault.

        ``state`` is the state directory (default: :func:`mango.config.state_dir`).
        """
        env = os.environ if env is None else env
        kind_text = env.get(FILE_STORE_ENV, "").strip().lower() or FileStoreKind.FS.value
        try:
            kind = FileStoreKind(kind_text)
        except ValueError:
            raise ConfigurationError(
                f"{FILE_STORE_ENV} must be 'fs' or 's3', got {kind_text[:40]!r}"
            ) from None
        if kind is FileStoreKind.S3:
            return cls(
                kind=kind,
                s3_bucket=_bucket(env.get(S3_BUCKET_ENV, "").strip()),
                s3_prefix=_prefix(env.get(S3_PREFIX_ENV, "").strip()),
                s3_endpoint_url=_endpoint(env),
            )
        configured = env.get(FILE_STORE_DIR_ENV, "").strip()
        if configured:
            directory = Path(configured).expanduser()
            if not directory.is_absolute():
                raise ConfigurationError(
                    f"{FILE_STORE_DIR_ENV} must be an absolute path, got {configured!r}"
                )
        else:
            directory = (state if state is not None else state_dir(env)) / "files"
        return cls(kind=kind, directory=directory)

    @property
    def display(self) -> str:
        """Where the blobs are, safe to print."""
        if self.kind is FileStoreKind.FS:
            return f"filesystem store in {self.directory}"
        where = f"s3://{self.s3_bucket}/{self.s3_prefix}".rstrip("/")
        endpoint = self.s3_endpoint_url or "AWS"
        return f"S3 store {where} at {endpoint}"


def open_file_store(settings: FileStoreSettings) -> FileStore:
    """Build the selected store; the S3 client library is imported only for ``s3``."""
    if settings.kind is FileStoreKind.FS:
        from mango.filestore.fs import FilesystemFileStore

        assert settings.directory is not None  # noqa: S101 - from_env sets it for fs
        return FilesystemFileStore(settings.directory)
    try:
        from mango.filestore.s3 import S3FileStore
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("obstore"):
            raise
        raise ConfigurationError(
            f"{FILE_STORE_ENV}=s3 needs the S3 client, which is not installed",
            hint="pip install 'mango-core[s3]'",
        ) from None
    assert settings.s3_bucket is not None  # noqa: S101 - from_env sets it for s3
    return S3FileStore(
        settings.s3_bucket, prefix=settings.s3_prefix, endpoint_url=settings.s3_endpoint_url
    )
