"""Composition root shared by the command line and the worker.

It is the only place that wires adapters together: plugins -> provider,
database (embedded or ``MANGO_DATABASE_URL``) -> store, and both into a
:class:`~mango.app.SessionManager`; database and Files store
(``MANGO_FILE_STORE``) into :class:`~mango.app.files.StoredFiles`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from mango.app import SessionManager
from mango.app.files import StoredFiles
from mango.config import Settings
from mango.domain.ports import BindingStore, Provider
from mango.domain.registry import ProviderContext, ProviderRegistration, ProviderRegistry
from mango.domain.values import SandboxSpec
from mango.filestore import FileStoreSettings, open_file_store
from mango.plugins import PluginHost, load_plugins
from mango.postgres import PostgresBindingStore, PostgresFileCatalog, open_store, redact_conninfo

__all__ = [
    "Runtime",
    "database_display",
    "deployment_context",
    "open_database",
    "open_runtime",
    "open_stored_files",
    "select_provider",
]


def database_display(settings: Settings) -> str:
    """Where the database is, safe to print: every libpq secret form is masked."""
    if settings.database_url is None:
        return f"embedded PostgreSQL under {settings.state_dir / 'postgres'}"
    return redact_conninfo(settings.database_url)


@attrs.define
class Runtime:
    """Everything a command needs, opened and ready."""

    settings: Settings
    registry: ProviderRegistry
    registration: ProviderRegistration
    store: PostgresBindingStore
    manager: SessionManager

    def default_spec(self) -> SandboxSpec:
        """The spec used for Sessions created from the command line."""
        return SandboxSpec(timeout=self.settings.exec_timeout)


def select_provider(
    settings: Settings, host: PluginHost | None = None
) -> tuple[ProviderRegistry, ProviderRegistration]:
    """Load plugins and find the selected provider; unknown names fail here, at startup.

    ``MANGO_DISABLE_PLUGINS`` is read from ``settings.environ``.
    """
    registry = (host or load_plugins(environ=settings.environ)).providers()
    return registry, registry.get(settings.sandbox)


async def deployment_context(settings: Settings, store: BindingStore) -> ProviderContext:
    """The context providers are opened with.

    Its namespace is ``MANGO_NAMESPACE`` if set, else the store's; its
    environment is ``settings.environ``, where the provider reads its settings.
    """
    namespace = settings.namespace or await store.deployment_namespace()
    return ProviderContext(namespace=namespace, environ=settings.environ)


@asynccontextmanager
async def open_database(settings: Settings, *, linger: bool = False) -> AsyncIterator[str]:
    """Yield a database URL: ``MANGO_DATABASE_URL`` or a private embedded server.

    With ``linger`` (short-lived commands) an embedded server is left running
    for ``settings.embedded_idle_seconds`` after the block, for the next
    command to join; without it (workers, applications) the last user stops it.
    """
    if settings.database_url is not None:
        yield settings.database_url
        return
    from mango.embedded.postgres import embedded_postgres

    idle = settings.embedded_idle_seconds if linger else 0.0
    async with embedded_postgres(settings.state_dir / "postgres", idle_seconds=idle) as url:
        yield url


def _with_faults(provider: Provider, store: BindingStore) -> tuple[Provider, BindingStore]:
    """Crash injection for recovery tests (``MANGO_FAULT_POINT``); unchanged when it is unset."""
    if not os.environ.get("MANGO_FAULT_POINT", "").strip():
        return provider, store
    from mango.temporal.faults import fault_point_from_env, inject_faults

    return inject_faults(provider, store, fault_point_from_env())


@asynccontextmanager
async def open_runtime(
    settings: Settings, host: PluginHost | None = None, *, linger: bool = False
) -> AsyncIterator[Runtime]:
    """Open plugins, database, store, provider and SessionManager; close them in reverse.

    ``linger`` is passed to :func:`open_database`.

    With ``MANGO_FAULT_POINT`` set (recovery tests only) the manager's
    provider and store crash the process at that point
    (:mod:`mango.temporal.faults`); ``Runtime.store`` stays the plain store.
    """
    registry, registration = select_provider(settings, host)
    async with open_database(settings, linger=linger) as url:
        store = await open_store(url)
        try:
            provider = registry.open(settings.sandbox, await deployment_context(settings, store))
            managed_provider, managed_store = _with_faults(provider, store)
            manager = SessionManager(
                managed_provider,
                managed_store,
                registration.capabilities,
                registration.quirks,
                package_manager_hosts=settings.package_manager_hosts,
            )
            try:
                yield Runtime(settings, registry, registration, store, manager)
            finally:
                await manager.aclose()
        finally:
            await store.aclose()


@asynccontextmanager
async def open_stored_files(
    settings: Settings, file_settings: FileStoreSettings, *, linger: bool = False
) -> AsyncIterator[StoredFiles]:
    """Open the database and the selected Files store; yield :class:`StoredFiles` on them.

    No provider is opened: stored files do not need one. Blob keys carry
    ``MANGO_NAMESPACE`` if set, else the database's namespace. ``linger`` is
    passed to :func:`open_database`.
    """
    async with open_database(settings, linger=linger) as url:
        store = await open_store(url)
        try:
            namespace = settings.namespace or await store.deployment_namespace()
            blobs = open_file_store(file_settings)
            try:
                yield StoredFiles(PostgresFileCatalog(store.pool), blobs, namespace)
            finally:
                await blobs.aclose()
        finally:
            await store.aclose()
