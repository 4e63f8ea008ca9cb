"""Composition root shared by the command line and the worker.

It is the only place that wires adapters together: plugins -> provider,
database (embedded or ``MANGO_DATABASE_URL``) -> store, and both into a
:class:`~mango.app.SessionManager`; database and Files store
(``MANGO_FILE_STORE``) into :class:`~mango.app.files.StoredFiles`, and with
the resource and output catalogs into the manager's
:class:`~mango.app.session_files.SessionFiles`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs

from mango.app import SessionManager
from mango.app.admission import admit_environment
from mango.app.files import StoredFiles
from mango.app.instrumented import instrument
from mango.app.profiles import environment_fields
from mango.app.session_files import SessionFiles
from mango.app.skills import SessionSkills
from mango.config import Settings
from mango.domain.capabilities import Capability
from mango.domain.environments import SpecFields
from mango.domain.ports import BindingStore, Provider
from mango.domain.registry import ProviderContext, ProviderRegistration, ProviderRegistry
from mango.domain.values import SandboxSpec
from mango.filestore import FileStoreSettings, open_file_store
from mango.plugins import PluginHost, load_plugins
from mango.postgres import (
    PostgresBindingStore,
    PostgresFileCatalog,
    PostgresOutputCatalog,
    PostgresResourceCatalog,
    PostgresSkillCatalog,
    open_store,
    redact_conninfo,
)

__all__ = [
    "PortsWrapper",
    "Runtime",
    "database_display",
    "deployment_context",
    "environment_of",
    "open_database",
    "open_runtime",
    "open_session_skills",
    "open_stored_files",
    "resolve_spec",
    "select_provider",
]


PortsWrapper = Callable[[Provider, BindingStore], tuple[Provider, BindingStore]]
"""Wraps the provider and store a SessionManager is built on; a seam for tests.

The crash-recovery tests pass one (crash injection, :mod:`mango.temporal.faults`)
through their own entry point; production code passes none and reads no
setting for it.
"""


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
    provider: Provider | None = None
    """The selected provider, instrumented (the manager's may be wrapped further by tests)."""

    @property
    def files(self) -> SessionFiles:
        """The Session resources, outputs and the Files store."""
        return self.manager.session_files

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


def environment_of(
    settings: Settings,
    profile: str | None = None,
    *,
    packages: Iterable[str] = (),
    overrides: SpecFields | None = None,
) -> dict[str, Any]:
    """The environment a Session asks for: ``MANGO_EXEC_TIMEOUT``, the profile, the rest.

    The one way the command line, the Python API and the worker resolve a
    profile (:func:`mango.app.profiles.environment_fields`).
    """
    defaults = {} if settings.exec_timeout is None else {"timeout": settings.exec_timeout}
    return environment_fields(
        settings.profiles(), profile, defaults=defaults, packages=packages, overrides=overrides
    )


def resolve_spec(
    settings: Settings,
    profile: str | None = None,
    *,
    packages: Iterable[str] = (),
    overrides: SpecFields | None = None,
    resources: Iterable[Capability] = (),
    host: PluginHost | None = None,
) -> SandboxSpec:
    """The admitted spec of an environment for ``MANGO_SANDBOX``; nothing is opened or written.

    Admission reads the selected provider's registration only (no factory,
    no credentials) and raises :class:`~mango.domain.errors.AdmissionRejected`
    with every reason (:func:`mango.app.admission.admit_environment`).
    """
    _, registration = select_provider(settings, host)
    fields = environment_of(settings, profile, packages=packages, overrides=overrides)
    return admit_environment(registration.name, registration.capabilities, fields, resources)


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


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    host: PluginHost | None = None,
    *,
    linger: bool = False,
    wrap_ports: PortsWrapper | None = None,
) -> AsyncIterator[Runtime]:
    """Open plugins, database, store, provider and SessionManager; close them in reverse.

    ``linger`` is passed to :func:`open_database`. ``wrap_ports`` (tests
    only) wraps the manager's provider and store; ``Runtime.store`` stays
    the plain store.
    """
    registry, registration = select_provider(settings, host)
    file_settings = FileStoreSettings.from_env(settings.environ, state=settings.state_dir)
    async with open_database(settings, linger=linger) as url:
        store = await open_store(url)
        blobs = None
        try:
            context = await deployment_context(settings, store)
            opened = registry.open(settings.sandbox, context)
            provider = instrument(opened)  # spans and metrics: no-ops unless an SDK is set up
            blobs = open_file_store(file_settings)
            stored = StoredFiles(PostgresFileCatalog(store.pool), blobs, context.namespace)
            files = SessionFiles(
                PostgresResourceCatalog(store.pool), PostgresOutputCatalog(store.pool), stored
            )
            skills = SessionSkills(PostgresSkillCatalog(store.pool), blobs, context.namespace)
            managed: tuple[Provider, BindingStore] = (provider, store)
            if wrap_ports is not None:
                managed = wrap_ports(provider, store)
            managed_provider, managed_store = managed
            manager = SessionManager(
                managed_provider,
                managed_store,
                registration.capabilities,
                registration.quirks,
                package_manager_hosts=settings.package_manager_hosts,
                max_sandboxes=settings.fleet.max_sandboxes,
                evict_action=settings.fleet.evict_action,
                files=files,
                skills=skills,
            )
            try:
                yield Runtime(settings, registry, registration, store, manager, provider)
            finally:
                await manager.aclose()
        finally:
            if blobs is not None:
                await blobs.aclose()
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


@asynccontextmanager
async def open_session_skills(
    settings: Settings, file_settings: FileStoreSettings, *, linger: bool = False
) -> AsyncIterator[SessionSkills]:
    """Open the database and the Files store; yield :class:`SessionSkills` on them.

    No provider is opened: uploading and listing skills do not need one
    (pinning them does: :meth:`SessionManager.create_session`). Blob keys
    carry the namespace as :func:`open_stored_files` says.
    """
    async with open_database(settings, linger=linger) as url:
        store = await open_store(url)
        try:
            namespace = settings.namespace or await store.deployment_namespace()
            blobs = open_file_store(file_settings)
            try:
                yield SessionSkills(PostgresSkillCatalog(store.pool), blobs, namespace)
            finally:
                await blobs.aclose()
        finally:
            await store.aclose()
