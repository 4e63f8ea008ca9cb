"""Frozen value objects shared by every layer.

Values validate themselves on construction and raise :class:`InvalidInput`
(a permanent error) naming the field, so a malformed value never travels far.

Over 400 lines on purpose: these are the contract's value types (specs,
commands, results, references, records), each small; splitting them by kind
would scatter what every layer imports together.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs

from mango.domain.errors import InvalidInput
from mango.domain.limits import MemorySize, parse_cpus
from mango.domain.paths import normalize_workspace_dir
from mango.domain.validators import positive_int, positive_number

__all__ = [
    "MAX_SESSION_ID_LENGTH",
    "Binding",
    "Command",
    "Eviction",
    "ExecEvent",
    "ExecResult",
    "NetworkMode",
    "OutputChunk",
    "OutputStream",
    "OwnedResource",
    "PackagePlan",
    "ProvisioningIntent",
    "SandboxRef",
    "SandboxSpec",
    "SessionRecord",
    "validate_host",
    "validate_provider_name",
    "validate_session_id",
]

MAX_SESSION_ID_LENGTH = 255
_PROVIDER_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a usable Session id, else raise :class:`InvalidInput`.

    A Session id is 1 to 255 printable characters with no whitespace at either
    end, in Unicode normal form NFC. Two spellings of one text (``café`` as
    ``é`` or as ``e`` and a combining accent) print identically but are
    different strings, hashes and database keys: they would be two Sessions
    nobody can tell apart. So an id that is not NFC is refused, naming its NFC
    spelling, rather than normalised: every boundary (command line, Python
    API, Temporal payloads, providers) checks ids through this function, and
    none of them can then silently address another Session than the one the
    caller spelled.
    """
    if not isinstance(session_id, str):
        raise InvalidInput(f"session id must be a string, got {type(session_id).__name__}")
    if not session_id:
        raise InvalidInput("session id is empty")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidInput(f"session id is longer than {MAX_SESSION_ID_LENGTH} characters")
    if session_id != session_id.strip():
        raise InvalidInput(f"session id {session_id!r} has leading or trailing whitespace")
    if not session_id.isprintable():
        raise InvalidInput(f"session id {session_id!r} contains non-printable characters")
    if not unicodedata.is_normalized("NFC", session_id):
        # !a (ascii) shows the difference that printing hides.
        raise InvalidInput(
            f"session id {session_id!a} is not in Unicode normal form NFC; "
            f"its NFC spelling {unicodedata.normalize('NFC', session_id)!a} "
            "prints the same and is the one mango accepts"
        )
    return session_id


def validate_provider_name(name: object) -> str:
    """Return ``name`` if it is a lowercase provider identifier (``[a-z][a-z0-9-]*``)."""
    if not isinstance(name, str) or not _PROVIDER_NAME.match(name):
        raise InvalidInput(
            f"provider name {name!r} is not a lowercase identifier "
            "(a letter, then letters, digits or '-', at most 63 characters)"
        )
    return name


def _session_id_validator(_instance: object, _attribute: object, value: Any) -> None:
    validate_session_id(value)


def _provider_validator(_instance: object, _attribute: object, value: Any) -> None:
    validate_provider_name(value)


def _non_empty(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{attribute.name} must be a non-empty string")


def _str_tuple(values: Iterable[str] | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str | bytes):
        raise InvalidInput("expected a list of strings, got a single string")
    result = tuple(values)
    for value in result:
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"expected non-empty strings, got {value!r}")
    return result


MAX_HOST_LENGTH = 253
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
_IPV4 = re.compile(r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\Z")
_HOST_FORBIDDEN = frozenset("/:#?@[]")


def validate_host(host: object) -> str:
    """Return ``host`` if it may stand in an egress allowlist, else raise :class:`InvalidInput`.

    An allowlist entry is a bare host name (``pkgs.example.test``), a
    wildcard over one (``*.example.test``) or an IPv4 literal: at most 253
    characters, no surrounding whitespace, none of ``/:#?@[]`` (so no URL,
    port, user or IPv6 literal), labels of 1 to 63 letters, digits or ``-``
    that neither start nor end with ``-``. The rule is the one the API
    applies before anything reaches a provider.
    """
    if not isinstance(host, str) or not host:
        raise InvalidInput(f"allowlist host must be a non-empty string, got {host!r}")
    if host != host.strip():
        raise InvalidInput(f"allowlist host {host!r} has surrounding whitespace")
    if len(host) > MAX_HOST_LENGTH:
        raise InvalidInput(f"allowlist host is longer than {MAX_HOST_LENGTH} characters")
    if _HOST_FORBIDDEN.intersection(host):
        raise InvalidInput(
            f"allowlist host {host!r} must be a bare host name, '*.' wildcard or IPv4 "
            "address (no scheme, port, path, user or IPv6 literal)"
        )
    octets = host.split(".")
    if len(octets) == 4 and all(_IPV4.match(octet) for octet in octets):
        return host
    name = host[2:] if host.startswith("*.") else host
    if not all(_HOST_LABEL.match(label) for label in name.split(".")):
        raise InvalidInput(
            f"allowlist host {host!r} is not a host name: labels are 1-63 letters, digits "
            "or '-', not starting or ending with '-'"
        )
    return host


def _hosts(values: Iterable[str] | None) -> tuple[str, ...]:
    """Validate and normalise an allowlist: lower-cased, de-duplicated, sorted."""
    return tuple(sorted({validate_host(host).lower() for host in _str_tuple(values)}))


class NetworkMode(enum.StrEnum):
    """Network access of a sandbox."""

    NONE = "none"
    BRIDGE = "bridge"
    LIMITED = "limited"


@attrs.frozen
class PackagePlan:
    """Packages installed once, before a sandbox is bound, per package manager."""

    apt: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    cargo: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    gem: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    go: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    npm: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    pip: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)

    @property
    def is_empty(self) -> bool:
        """True when no manager has anything to install."""
        return not (self.apt or self.cargo or self.gem or self.go or self.npm or self.pip)


def _memory(value: str | int | None) -> str | None:
    """Check a memory size by the one grammar; the text is kept as given (it is hashed)."""
    if value is None:
        return None
    MemorySize.parse(value)
    return str(value) if isinstance(value, int) else value


def _cpus(value: float | str | None) -> float | None:
    """Check a CPU count by the one grammar; a number is kept, text becomes its number."""
    if value is None:
        return None
    cpus = parse_cpus(value)
    return cpus if isinstance(value, str) else value


def _network_mode(value: NetworkMode | str) -> NetworkMode:
    try:
        return NetworkMode(value)
    except ValueError:
        allowed = ", ".join(mode.value for mode in NetworkMode)
        raise InvalidInput(f"network must be one of {allowed}, got {value!r}") from None


@attrs.frozen
class SandboxSpec:
    """What to provision for a Session. Non-secret: it is stored with intents."""

    timeout: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(positive_number)
    )
    """Default per-exec timeout in seconds; ``None`` means no bound."""
    image: str | None = None
    """Container image for container providers; ``None`` means the provider default."""
    memory: str | None = attrs.field(default=None, converter=_memory)
    """Memory limit such as ``512m`` or ``2Gi`` (:data:`~mango.domain.limits.MEMORY_GRAMMAR`;
    a whole number is bytes); ``None`` means the provider default. The text is kept as
    given, :attr:`memory_bytes` is its value."""
    cpus: float | None = attrs.field(default=None, converter=_cpus)
    """CPU limit such as ``1.5`` or ``"500m"`` (:data:`~mango.domain.limits.CPUS_GRAMMAR`),
    kept as a number; ``None`` means the provider default."""
    network: NetworkMode = attrs.field(default=NetworkMode.NONE, converter=_network_mode)
    pids_limit: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(positive_int)
    )
    network_allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=_hosts)
    """Final egress allowlist; only meaningful with ``network=limited``."""
    setup_network_allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=_hosts)
    """Temporary allowlist used only while packages are installed."""
    packages: PackagePlan = attrs.field(factory=PackagePlan)

    @functools.cached_property
    def memory_size(self) -> MemorySize | None:
        """``memory`` parsed: what a provider translates into its own units."""
        return None if self.memory is None else MemorySize.parse(self.memory)

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes; ``None`` means the provider default."""
        size = self.memory_size
        return None if size is None else size.bytes


def _argv(values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str | bytes):
        raise InvalidInput("argv must be a sequence of strings, not one string")
    argv = tuple(values)
    if not argv:
        raise InvalidInput("argv is empty; give at least the program to run")
    for arg in argv:
        if not isinstance(arg, str):
            raise InvalidInput(f"argv items must be strings, got {type(arg).__name__}")
        if "\x00" in arg:
            raise InvalidInput("argv items may not contain NUL bytes")
    if not argv[0]:
        raise InvalidInput("argv[0] (the program) is empty")
    return argv


def _env(
    values: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> tuple[tuple[str, str], ...]:
    if values is None:
        return ()
    items = values.items() if isinstance(values, Mapping) else values
    result: dict[str, str] = {}
    for key, value in items:
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise InvalidInput(f"environment variable name {key!r} is not valid")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidInput(f"environment variable {key} must be a string without NUL")
        result[key] = value
    return tuple(sorted(result.items()))


def _stdin(value: bytes | None) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInput(f"stdin must be bytes, got {type(value).__name__}")
    return bytes(value)


@attrs.frozen
class Command:
    """One command: an argv vector (never a shell string), stdin, env, cwd and timeout.

    Callers that want a shell pass ``("/bin/sh", "-c", script)`` explicitly.
    ``cwd`` is workspace-relative (``""`` is the root). ``timeout`` in seconds
    overrides the spec's default.
    """

    argv: tuple[str, ...] = attrs.field(converter=_argv)
    stdin: bytes = attrs.field(default=b"", converter=_stdin)
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_env)
    cwd: str = attrs.field(default="", converter=normalize_workspace_dir)
    timeout: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(positive_number)
    )

    @property
    def env_dict(self) -> dict[str, str]:
        """The extra environment as a new dict."""
        return dict(self.env)


@attrs.frozen
class ExecResult:
    """What a command produced.

    A non-zero ``exit_code`` is data, not an error. ``timed_out`` means the
    command hit its timeout and was terminated (``exit_code`` is then -1);
    ``cancelled`` means it was terminated because its sandbox was torn down
    while it ran (``exit_code`` is then -1 too). Each stream holds at most the provider's cap; the
    ``*_truncated`` flags say that bytes past the cap were discarded.
    """

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """True when the command ran to completion with exit code 0."""
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


class OutputStream(enum.StrEnum):
    """Which output stream of a command a chunk came from."""

    STDOUT = "stdout"
    STDERR = "stderr"


@attrs.frozen
class OutputChunk:
    """Bytes a command wrote to one stream, delivered as they arrive (streaming exec)."""

    stream: OutputStream = attrs.field(converter=OutputStream)
    data: bytes


ExecEvent = OutputChunk | ExecResult
"""What a streaming exec yields: chunks, then exactly one final :class:`ExecResult`."""


def _external_id_validator(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidInput("sandbox reference has an empty external id")
    if len(value) > 1024 or not value.isprintable():
        raise InvalidInput("sandbox reference external id is too long or not printable")


@attrs.frozen
class SandboxRef:
    """Durable, non-secret identity of one provider resource."""

    provider: str = attrs.field(validator=_provider_validator)
    external_id: str = attrs.field(validator=_external_id_validator)

    def __str__(self) -> str:
        return f"{self.provider}:{self.external_id}"

    @classmethod
    def parse(cls, text: str) -> SandboxRef:
        """Parse ``provider:external-id``; raise :class:`InvalidInput` if malformed."""
        provider, sep, external_id = text.partition(":")
        if not sep:
            raise InvalidInput(f"malformed sandbox reference {text!r}: expected 'provider:id'")
        return cls(provider=provider, external_id=external_id)


def _aware(_instance: object, _attribute: object, value: Any) -> None:
    if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
        raise InvalidInput(f"created_at must be a timezone-aware datetime, got {value!r}")


@attrs.frozen
class OwnedResource:
    """A resource a provider holds for this deployment, as :meth:`Provider.list_owned` sees it.

    ``session_hash`` is the fixed-length ownership label (never the raw Session id).
    ``created_at`` is when the backend says the resource was made (timezone-aware),
    or None if it does not say: ``mango gc`` never sweeps a resource of unknown age.
    """

    ref: SandboxRef
    session_hash: str = attrs.field(validator=_non_empty)
    created_at: datetime | None = attrs.field(default=None, kw_only=True, validator=_aware)


@attrs.frozen
class Eviction:
    """The idle eviction of a bound resource: when, after how long unused, and if it is done."""

    at: datetime
    idle_seconds: float
    finished: bool = False
    """True once the resource's destroy succeeded."""


@attrs.frozen
class Binding:
    """Durable link from a Session to its one sandbox resource.

    ``lost_at`` is set (once) when the provider reported the resource gone;
    ``eviction`` once the idle eviction took the resource. Either way the
    binding is never replaced, only deleted with its Session. ``paused_at``
    is set before the provider pauses the resource and cleared after it
    resumed it; ``pause_finished`` once the provider confirmed the pause.
    """

    session_id: str = attrs.field(validator=_session_id_validator)
    ref: SandboxRef
    spec_hash: str = attrs.field(validator=_non_empty)
    lost_at: datetime | None = attrs.field(default=None, kw_only=True)
    eviction: Eviction | None = attrs.field(default=None, kw_only=True)
    paused_at: datetime | None = attrs.field(default=None, kw_only=True)
    pause_finished: bool = attrs.field(default=False, kw_only=True)

    @property
    def paused(self) -> bool:
        """True while the bound resource is (or is being) paused."""
        return self.paused_at is not None

    @property
    def lost(self) -> bool:
        """True once the bound resource was reported gone."""
        return self.lost_at is not None

    @property
    def evicted(self) -> bool:
        """True once the idle eviction marked the bound resource for removal."""
        return self.eviction is not None


@attrs.frozen
class ProvisioningIntent:
    """Written before a provider creates anything, so a crash leaves a trace.

    ``deleting`` is projected from the Session's deletion fence when listing.
    """

    session_id: str = attrs.field(validator=_session_id_validator)
    provider: str = attrs.field(validator=_provider_validator)
    spec: SandboxSpec
    spec_hash: str = attrs.field(validator=_non_empty)
    deleting: bool = False


@attrs.frozen
class SessionRecord:
    """A Session row: its id, creation time and deletion fence (UTC).

    ``paused_at`` is projected from its binding's pause mark, so the one
    read every operation makes sees a pause made by another process.
    """

    session_id: str = attrs.field(validator=_session_id_validator)
    created_at: datetime
    deleting_at: datetime | None = None
    paused_at: datetime | None = None

    @property
    def paused(self) -> bool:
        """True while the Session's bound resource is (or is being) paused."""
        return self.paused_at is not None

    @property
    def deleting(self) -> bool:
        """True once the Session is fenced for deletion."""
        return self.deleting_at is not None
