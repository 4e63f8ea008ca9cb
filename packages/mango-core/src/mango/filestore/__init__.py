"""The Files store adapters: blobs on the filesystem (default) or in an S3-compatible bucket.

:func:`open_file_store` builds the one :class:`FileStoreSettings` selects.
Importing this package imports no S3 client: :mod:`mango.filestore.s3`
(obstore, extra ``mango-core[s3]``) is loaded only when ``MANGO_FILE_STORE=s3``.
"""

from mango.filestore.fs import FilesystemFileStore
from mango.filestore.settings import (
    FILE_STORE_DIR_ENV,
    FILE_STORE_ENV,
    S3_BUCKET_ENV,
    S3_ENDPOINT_URL_ENV,
    S3_PREFIX_ENV,
    FileStoreKind,
    FileStoreSettings,
    open_file_store,
)

__all__ = [
    "FILE_STORE_DIR_ENV",
    "FILE_STORE_ENV",
    "S3_BUCKET_ENV",
    "S3_ENDPOINT_URL_ENV",
    "S3_PREFIX_ENV",
    "FileStoreKind",
    "FileStoreSettings",
    "FilesystemFileStore",
    "open_file_store",
]
