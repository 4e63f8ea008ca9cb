"""The public Python API for applications that embed mango.

An application (an agent platform) opens one :class:`~mango.app.SessionManager`
on the configured store and provider and uses it for every Session::

    import asyncio

    import mango


    async def main() -> None:
        async with mango.open_session_manager() as manager:
            await manager.ensure_session("demo")
            sandbox = await manager.acquire("demo", mango.SandboxSpec())
            await sandbox.write_file("note.txt", b"hello\\n")
            result = await sandbox.exec(mango.Command(["cat", "note.txt"]))
            print(result.stdout.decode(), end="")
            await manager.release("demo")


    asyncio.run(main())

Configuration comes from the process environment (the same ``MANGO_*``
variables as the command line: ``MANGO_SANDBOX``, ``MANGO_DATABASE_URL``,
``MANGO_STATE_DIR``, ...), from a mapping given as ``environ=`` or from an
explicit :class:`~mango.config.Settings`. The provider's own settings
(``E2B_API_KEY``, ``MANGO_SANDBOX_IMAGE``, ...) come from the same place:
with ``environ=`` (or ``Settings.from_env(mapping)``) the process environment
is not read at all, so two managers in one process can use differently
configured providers. With no ``MANGO_DATABASE_URL`` an embedded PostgreSQL
server under the state directory is used (it needs the ``embedded`` extra,
installed by default).

Skills are uploaded the same way (no provider needed) and pinned by a
Session when it is created (a provider with ``skill-bundles`` needed)::

    async with mango.open_skills() as skills:
        version = await skills.add("./my-skill")  # a directory with SKILL.md, or a zip
    async with mango.open_session_manager() as manager:
        await manager.create_session("demo", skills=[str(version.ref)])

Stored files (the Files store) open the same way, without a provider::

    async with mango.open_file_store() as files:
        stored = await files.put_path("report.pdf")
        async with files.open(stored.file_id) as chunks:
            async for chunk in chunks:
                ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mango.app import SessionManager
from mango.app.files import StoredFiles
from mango.app.skills import SessionSkills
from mango.config import Settings
from mango.domain.values import SandboxSpec
from mango.filestore import FileStoreSettings
from mango.runtime import open_runtime, open_session_skills, open_stored_files
from mango.runtime import resolve_spec as _resolve_spec

__all__ = ["open_file_store", "open_session_manager", "open_skills", "resolve_spec"]


def resolve_spec(
    profile: str | None = None,
    *,
    packages: Iterable[str] = (),
    settings: Settings | None = None,
    environ: Mapping[str, str] | None = None,
    **fields: Any,
) -> SandboxSpec:
    """The spec of an environment, admitted for the configured provider; nothing is opened.

    ``profile`` names an environment profile (``MANGO_PROFILES_FILE``, or the
    built-in ``cloud``); ``packages`` adds ``MANAGER:NAME`` texts
    (``"pip:requests==2.32.3"``); ``fields`` override the profile's
    (``network="bridge"``, ``network_allowed_hosts=[...]``, ...). The command
    line's ``--profile`` and ``--package`` resolve the same way. Raises
    :class:`~mango.domain.errors.AdmissionRejected` (or its subclass
    :class:`~mango.domain.errors.CapabilityNotSupported`) listing every
    reason the provider selected by ``MANGO_SANDBOX`` cannot run it; the
    provider is not constructed and no credential is read.
    """
    resolved = settings if settings is not None else Settings.from_env(environ)
    return _resolve_spec(resolved, profile, packages=packages, overrides=fields)


@asynccontextmanager
async def open_session_manager(
    settings: Settings | None = None, *, environ: Mapping[str, str] | None = None
) -> AsyncIterator[SessionManager]:
    """Open the store and the selected provider and yield a ready :class:`SessionManager`.

    ``settings`` defaults to :meth:`Settings.from_env` over ``environ`` (default:
    ``os.environ``); the provider is opened with ``settings.environ`` and reads
    its settings from it. On exit the provider's connections and the store are
    closed; sandboxes stay (they are durable). Raises
    :class:`~mango.domain.errors.ConfigurationError` or
    :class:`~mango.domain.errors.UnknownProvider` for bad settings, before
    anything is opened.
    """
    resolved = settings if settings is not None else Settings.from_env(environ)
    async with open_runtime(resolved) as runtime:
        yield runtime.manager


@asynccontextmanager
async def open_file_store(
    settings: Settings | None = None,
    *,
    file_settings: FileStoreSettings | None = None,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[StoredFiles]:
    """Open the database and the Files store and yield :class:`~mango.app.files.StoredFiles`.

    ``settings`` and ``file_settings`` default to :meth:`Settings.from_env`
    and :meth:`FileStoreSettings.from_env` over ``environ`` (default:
    ``os.environ``): ``MANGO_FILE_STORE`` (``fs`` or ``s3``) and the
    ``MANGO_FILE_STORE_DIR`` / ``MANGO_S3_*`` settings, credentials from the
    usual ``AWS_*`` environment. Bad settings raise
    :class:`~mango.domain.errors.ConfigurationError` before anything is
    opened. On exit the store and the database connections are closed; the
    files stay.
    """
    resolved = settings if settings is not None else Settings.from_env(environ)
    store_settings = (
        file_settings
        if file_settings is not None
        else FileStoreSettings.from_env(environ, state=resolved.state_dir)
    )
    async with open_stored_files(resolved, store_settings) as files:
        yield files


@asynccontextmanager
async def open_skills(
    settings: Settings | None = None,
    *,
    file_settings: FileStoreSettings | None = None,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[SessionSkills]:
    """Open the database and the Files store and yield :class:`~mango.app.skills.SessionSkills`.

    Upload (``add``), list (``list_versions``) and resolve skills without a
    provider; the settings as :func:`open_file_store` reads them. A Session
    pins versions through :meth:`SessionManager.create_session`.
    """
    resolved = settings if settings is not None else Settings.from_env(environ)
    store_settings = (
        file_settings
        if file_settings is not None
        else FileStoreSettings.from_env(environ, state=resolved.state_dir)
    )
    async with open_session_skills(resolved, store_settings) as skills:
        yield skills
