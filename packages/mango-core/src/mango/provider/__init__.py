"""The provider-author surface: everything a backend distribution imports from mango-core.

A provider plugin (``mango_provider_*``) and the conformance suite import this
package and its submodules only; an import-linter contract keeps it so. It
pulls neither temporalio, psycopg nor click. Modules that need an optional
library are submodules, imported only by the providers that use them:

* :mod:`mango.provider.paths` (no extra library; its names are re-exported here):
  the path policy over a stat callback;
* :mod:`mango.provider.http` (httpx, stamina): error map and the API client for
  remote APIs, with :mod:`mango.provider.retries` (stamina: bounded retries
  honouring ``Retry-After``) and :mod:`mango.provider.transports` (httpx: the
  pinned-address transport);
* :mod:`mango.provider.shell` (stdlib only): the remote command-line rule.

The scaffold for vendor fakes is not part of this surface: it runs sandboxes
on the local provider, so it lives above the adapters, in :mod:`mango.fakes`.

:mod:`mango.provider.packages` is package setup as SessionManager runs it
(the commands a ``package-setup`` provider's sandboxes must run, and the
step itself, for the conformance suite).

Submodules with no optional library: :mod:`mango.provider.ownership`
(labels, deterministic names, ownership checks, all namespaced),
:mod:`mango.provider.reads` (reads bounded at the source: the read cap, the
size check, a bounded collector),
:mod:`mango.provider.files` (``read_file``, ``open_file``, ``write_file`` and
``write_stream`` over a file API's stat, download, mkdir and uploads; the
writes' bytes checks), :mod:`mango.provider.multipart` (a multipart form
built as it is sent),
:mod:`mango.provider.remote` (a remote sandbox's view of its provider, the one
"is the sandbox gone?" rule for files and exec, the remote sandbox base),
:mod:`mango.provider.execution` (exec tracking, the timeout rule, streams),
:mod:`mango.provider.tasks` (waiting for a task even when cancelled),
:mod:`mango.provider.locks` (host file locks, shared or exclusive, that time
out instead of hanging), :mod:`mango.provider.hostdirs` (provider-owned
directories on the worker host), :mod:`mango.provider.hostfiles` (File
Resources kept in such a directory: atomic imports, markers, idempotent
removal) and :mod:`mango.provider.outputs` (an outputs archive read and
checked as mango publishes it).

Settings: a provider's factory receives a :class:`ProviderContext` and reads
every setting from ``context.environ`` (never ``os.environ``), checking
numbers with :func:`number_setting` and sizes with :class:`MemorySize` and
:func:`parse_cpus`; attrs fields use :func:`positive_int`,
:func:`positive_number` and :func:`non_negative_number`.

A plugin module (the entry-point target) holds the two hooks, marked with
:data:`hookimpl`::

    @hookimpl
    def mango_register_providers(registry: ProviderRegistry) -> None:
        registry.add(REGISTRATION)
"""

from __future__ import annotations

import pluggy

from mango.config import (
    MAX_OUTPUT_BYTES_ENV,
    MAX_OUTPUT_BYTES_SETTING,
    MAX_PROCESS_LOG_BYTES_ENV,
    MAX_PROCESS_LOG_BYTES_SETTING,
    MAX_READ_BYTES_ENV,
    MAX_READ_BYTES_SETTING,
    max_output_bytes,
    max_process_log_bytes,
    max_read_bytes,
    state_dir,
)
from mango.domain.capabilities import Capability, CapabilitySet, admit
from mango.domain.errors import (
    ConfigurationError,
    ContentMismatch,
    DirectoryNotEmpty,
    FileTooLarge,
    InvalidInput,
    InvalidMemory,
    InvalidPathError,
    MangoError,
    OutputRejected,
    OwnershipError,
    PathEscapeError,
    PathExists,
    PermanentError,
    ProcessNotFound,
    ProtocolError,
    ProviderUnavailable,
    ResourceConflict,
    SandboxNotFound,
    SandboxNotRunning,
    UnsafeArchiveError,
    is_permanent,
)
from mango.domain.hashing import session_key_hash
from mango.domain.limits import (
    CPUS_GRAMMAR,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_PROCESS_LOG_BYTES,
    DEFAULT_MAX_READ_BYTES,
    MAX_MEMORY_BYTES,
    MEMORY_GRAMMAR,
    MemorySize,
    parse_cpus,
)
from mango.domain.memories import (
    MAX_MEMORY_CONTENT_BYTES,
    MAX_MEMORY_FILES,
    MEMORY_ROOT,
    BaselineEntry,
    MemoryAccess,
    MemoryFile,
    MemorySnapshot,
    MemoryStoreMount,
    check_files,
    validate_memory_path,
)
from mango.domain.paths import (
    normalize_workspace_dir,
    normalize_workspace_path,
    split_workspace_path,
)
from mango.domain.ports import (
    FileResourceSandbox,
    KeepAliveSandbox,
    LimitedNetworkSandbox,
    MemoryStoreSandbox,
    PackageSetupSandbox,
    Provider,
    PurgingProvider,
    ResourceLockSandbox,
    Sandbox,
    SessionOutputSandbox,
    SkillBundleSandbox,
)
from mango.domain.registry import (
    ConformanceTarget,
    ConformanceTargetRegistry,
    ProviderContext,
    ProviderRegistration,
    ProviderRegistry,
    Quirk,
    SettingSpec,
    SupportLevel,
    TargetCost,
)
from mango.domain.resources import OUTPUTS_ROOT, UPLOADS_ROOT, FileResourceMount
from mango.domain.sandbox_ports import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    DirectoryListing,
    ExposedPort,
    FileInfo,
    FileKind,
    FileSystemSandbox,
    PausableProvider,
    PausableSandbox,
    PortSandbox,
    ProcessHandle,
    ProcessInfo,
    ProcessOutput,
    ProcessSandbox,
    ProcessState,
    check_port,
)
from mango.domain.skills import SKILLS_ROOT, SkillMount
from mango.domain.testbed import (
    ConformanceTestbed,
    EgressProbe,
    NetworkTestbed,
    PackageSource,
    PortTestbed,
)
from mango.domain.validators import (
    MAX_SETTING_SECONDS,
    non_negative_number,
    number_setting,
    positive_int,
    positive_number,
)
from mango.domain.values import (
    Command,
    ExecEvent,
    ExecResult,
    NetworkMode,
    OutputChunk,
    OutputStream,
    OwnedResource,
    PackagePlan,
    SandboxRef,
    SandboxSpec,
    validate_provider_name,
    validate_session_id,
)
from mango.provider.fileapi import ExecFileSystem, FirstEntries, check_list_limit
from mango.provider.paths import (
    Entry,
    EntryKind,
    ExtraRoot,
    Location,
    PathPolicy,
    ResolvedPath,
    StatCallback,
    check_directory,
    check_regular,
    file_not_found,
)

__all__ = [
    "CPUS_GRAMMAR",
    "DEFAULT_LIST_LIMIT",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_PROCESS_LOG_BYTES",
    "DEFAULT_MAX_READ_BYTES",
    "MAX_LIST_LIMIT",
    "MAX_MEMORY_BYTES",
    "MAX_MEMORY_CONTENT_BYTES",
    "MAX_MEMORY_FILES",
    "MAX_OUTPUT_BYTES_ENV",
    "MAX_OUTPUT_BYTES_SETTING",
    "MAX_PROCESS_LOG_BYTES_ENV",
    "MAX_PROCESS_LOG_BYTES_SETTING",
    "MAX_READ_BYTES_ENV",
    "MAX_READ_BYTES_SETTING",
    "MAX_SETTING_SECONDS",
    "MEMORY_GRAMMAR",
    "MEMORY_ROOT",
    "OUTPUTS_ROOT",
    "SKILLS_ROOT",
    "UPLOADS_ROOT",
    "BaselineEntry",
    "Capability",
    "CapabilitySet",
    "Command",
    "ConfigurationError",
    "ConformanceTarget",
    "ConformanceTargetRegistry",
    "ConformanceTestbed",
    "ContentMismatch",
    "DirectoryListing",
    "DirectoryNotEmpty",
    "EgressProbe",
    "Entry",
    "EntryKind",
    "ExecEvent",
    "ExecFileSystem",
    "ExecResult",
    "ExposedPort",
    "ExtraRoot",
    "FileInfo",
    "FileKind",
    "FileResourceMount",
    "FileResourceSandbox",
    "FileSystemSandbox",
    "FileTooLarge",
    "FirstEntries",
    "InvalidInput",
    "InvalidMemory",
    "InvalidPathError",
    "KeepAliveSandbox",
    "LimitedNetworkSandbox",
    "Location",
    "MangoError",
    "MemoryAccess",
    "MemoryFile",
    "MemorySize",
    "MemorySnapshot",
    "MemoryStoreMount",
    "MemoryStoreSandbox",
    "NetworkMode",
    "NetworkTestbed",
    "OutputChunk",
    "OutputRejected",
    "OutputStream",
    "OwnedResource",
    "OwnershipError",
    "PackagePlan",
    "PackageSetupSandbox",
    "PackageSource",
    "PathEscapeError",
    "PathExists",
    "PathPolicy",
    "PausableProvider",
    "PausableSandbox",
    "PermanentError",
    "PortSandbox",
    "PortTestbed",
    "ProcessHandle",
    "ProcessInfo",
    "ProcessNotFound",
    "ProcessOutput",
    "ProcessSandbox",
    "ProcessState",
    "ProtocolError",
    "Provider",
    "ProviderContext",
    "ProviderRegistration",
    "ProviderRegistry",
    "ProviderUnavailable",
    "PurgingProvider",
    "Quirk",
    "ResolvedPath",
    "ResourceConflict",
    "ResourceLockSandbox",
    "Sandbox",
    "SandboxNotFound",
    "SandboxNotRunning",
    "SandboxRef",
    "SandboxSpec",
    "SessionOutputSandbox",
    "SettingSpec",
    "SkillBundleSandbox",
    "SkillMount",
    "StatCallback",
    "SupportLevel",
    "TargetCost",
    "UnsafeArchiveError",
    "admit",
    "check_directory",
    "check_files",
    "check_list_limit",
    "check_port",
    "check_regular",
    "file_not_found",
    "hookimpl",
    "is_permanent",
    "max_output_bytes",
    "max_process_log_bytes",
    "max_read_bytes",
    "non_negative_number",
    "normalize_workspace_dir",
    "normalize_workspace_path",
    "number_setting",
    "parse_cpus",
    "positive_int",
    "positive_number",
    "session_key_hash",
    "split_workspace_path",
    "state_dir",
    "validate_memory_path",
    "validate_provider_name",
    "validate_session_id",
]

hookimpl = pluggy.HookimplMarker("mango")
"""The one marker for a plugin's hook implementations (``@hookimpl``)."""
