"""Provider registrations and the typed registry plugins add them to.

A registration is admission-safe: its name, capabilities, support level and
settings can be read without calling the factory, so nothing is constructed
and no credential is read until a provider is actually opened.
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.errors import ConfigurationError, InvalidInput, UnknownProvider
from mango.domain.ports import Provider
from mango.domain.testbed import ConformanceTestbed
from mango.domain.values import validate_provider_name

__all__ = [
    "ConformanceTarget",
    "ConformanceTargetRegistry",
    "ProviderContext",
    "ProviderRegistration",
    "ProviderRegistry",
    "Quirk",
    "SettingSpec",
    "SupportLevel",
    "TargetCost",
    "new_namespace",
    "validate_namespace",
]

_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9-]{0,30}[a-z0-9]\Z|[a-z0-9]\Z")


class SupportLevel(enum.StrEnum):
    """How far a provider has come (the design card's levels)."""

    AVAILABLE = "available"
    """Passes conformance and is supported for production use."""
    PREVIEW = "preview"
    """Passes conformance against its fake; live use is not yet proven at scale."""
    PLANNED = "planned"
    """Announced; not usable yet."""
    EVALUATING = "evaluating"
    """Under evaluation; may never ship."""
    DEVELOPMENT = "development"
    """For development only; not an isolation boundary (the local provider)."""


class TargetCost(enum.StrEnum):
    """What one operation of a conformance target costs: it sizes the suite's default run.

    The lifecycle machine makes thousands of provider calls in a deep run;
    each profile gives a target the budget of its cost, so a developer's
    default run of a container provider ends in a few minutes while a cheap
    target still gets hundreds of examples.
    """

    PROCESS = "process"
    """Host processes and directories: about a millisecond per operation (local, tinybox)."""
    CONTAINER = "container"
    """A local container engine: tens of milliseconds per operation (Docker)."""
    SERVICE = "service"
    """A sandbox service over HTTP whose every command starts processes in the sandbox: tens
    of milliseconds per operation against a local fake, more against the vendor (E2B, Cube,
    OpenSandbox, Daytona)."""


class Quirk(enum.StrEnum):
    """A deviation from the sandbox contract that a provider cannot avoid.

    Declared in the registration, so admission, SessionManager and the
    conformance suite read it without constructing the provider.
    """

    TIMEOUT_KILLS_LEADER_ONLY = "timeout-kills-leader-only"
    """A timeout or cancellation kills the command but may leave processes it started."""
    STDERR_MERGED = "stderr-merged"
    """The backend merges stderr into stdout; ``stderr`` is always empty."""
    OUTPUT_AT_END = "output-at-end"
    """The backend returns output only when the command ends; streaming delivers one chunk."""
    TIMEOUT_ENDS_SANDBOX = "timeout-ends-sandbox"
    """An exec timeout ends the whole sandbox; later operations raise ``SandboxNotFound``."""
    STEPS_AT_LEAST_ONCE = "steps-at-least-once"
    """A Temporal step whose worker dies runs its commands again on the retry (at least
    once): the sandbox keeps no step records (:mod:`mango.provider.steps`), so the retry
    cannot reattach to the dead worker's command, which may still run beside it."""


def validate_namespace(value: object) -> str:
    """Return ``value`` if it is a deployment namespace.

    1 to 32 of ``[a-z0-9-]``, with no '-' at either end.
    """
    if not isinstance(value, str) or not _NAMESPACE.match(value):
        raise InvalidInput(
            f"deployment namespace {value!r} must be 1 to 32 lowercase letters, digits or '-', "
            "not starting or ending with '-'"
        )
    return value


def new_namespace() -> str:
    """A fresh random deployment namespace: 12 lowercase hex (48 random bits)."""
    return secrets.token_hex(6)


def _namespace(_instance: object, _attribute: object, value: Any) -> None:
    validate_namespace(value)


def _quirks(values: Iterable[Quirk | str]) -> frozenset[Quirk]:
    return frozenset(Quirk(value) for value in values)


def _environ(value: Mapping[str, str]) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise InvalidInput(
            f"ProviderContext.environ must be a mapping of settings, got {type(value).__name__}"
        )
    return MappingProxyType(dict(value))


def _waivers(
    values: Mapping[Capability | str, str] | Iterable[tuple[Capability | str, str]],
) -> tuple[tuple[Capability, str], ...]:
    items = values.items() if isinstance(values, Mapping) else values
    waivers: dict[Capability, str] = {}
    for capability, reason in items:
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput(f"the waiver of {capability!r} needs a reason")
        try:
            waivers[Capability(capability)] = reason.strip()
        except ValueError:
            raise InvalidInput(f"{capability!r} is not a capability") from None
    return tuple(sorted(waivers.items()))


@attrs.frozen
class ProviderContext:
    """What mango hands a provider factory when the provider is opened.

    ``namespace`` is the deployment's namespace (see
    :meth:`~mango.domain.ports.BindingStore.deployment_namespace`); every
    ownership label and deterministic name the provider makes must carry it.

    ``environ`` is the environment the caller chose (the command line's
    process environment, or the mapping an application gave
    ``mango.open_session_manager(environ=...)``), as a read-only copy. A
    factory reads its settings from it and never from ``os.environ``, so two
    providers opened in one process with different mappings are configured
    differently. It holds credentials, so it is never shown.
    """

    namespace: str = attrs.field(validator=_namespace)
    environ: Mapping[str, str] = attrs.field(converter=_environ, repr=False, hash=False)


@attrs.frozen
class SettingSpec:
    """One setting a provider reads from its context's environment when it is opened."""

    env: str
    description: str
    default: str | None = None
    secret: bool = False
    """Secret values are never printed, logged or persisted; only their presence is."""
    required: bool = False


def _name(_instance: object, _attribute: object, value: Any) -> None:
    validate_provider_name(value)


@attrs.frozen
class ProviderRegistration:
    """What a plugin tells mango about one provider."""

    name: str = attrs.field(validator=_name)
    capabilities: CapabilitySet
    support_level: SupportLevel
    settings: tuple[SettingSpec, ...]
    factory: Callable[[ProviderContext], Provider] = attrs.field(repr=False)
    """Builds the provider from the deployment's context; called only when it is selected."""
    description: str = ""
    quirks: frozenset[Quirk] = attrs.field(default=frozenset(), converter=_quirks)
    """Contract deviations the provider cannot avoid (see :class:`Quirk`)."""


@attrs.define
class ProviderRegistry:
    """The registrations collected from plugins. ``add`` during loading, then read-only."""

    _registrations: dict[str, ProviderRegistration] = attrs.field(
        factory=dict, alias="_registrations"
    )

    def add(self, registration: ProviderRegistration) -> None:
        """Add one registration; a duplicate name is an error."""
        if not isinstance(registration, ProviderRegistration):
            raise InvalidInput(
                f"registry.add() takes a ProviderRegistration, got {type(registration).__name__}"
            )
        if registration.name in self._registrations:
            raise ConfigurationError(f"provider {registration.name!r} is registered twice")
        self._registrations[registration.name] = registration

    def names(self) -> tuple[str, ...]:
        """Sorted provider names."""
        return tuple(sorted(self._registrations))

    def __iter__(self) -> Iterator[ProviderRegistration]:
        return (self._registrations[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._registrations)

    def get(self, name: str) -> ProviderRegistration:
        """The registration for ``name``; :class:`UnknownProvider` lists what is installed."""
        try:
            return self._registrations[name]
        except KeyError:
            raise UnknownProvider(name, self.names()) from None

    def capabilities(self, name: str) -> CapabilitySet:
        """Declared capabilities of ``name``, without constructing anything."""
        return self.get(name).capabilities

    def open(self, name: str, context: ProviderContext) -> Provider:
        """Construct the provider ``name`` and check it matches its registration.

        Fails closed: an unknown name never falls back to another provider.
        """
        registration = self.get(name)
        provider = registration.factory(context)
        if provider.name != name:
            raise ConfigurationError(
                f"provider registered as {name!r} reports the name {provider.name!r}"
            )
        if provider.capabilities != registration.capabilities:
            declared = ", ".join(registration.capabilities.names()) or "none"
            reported = ", ".join(provider.capabilities.names()) or "none"
            raise ConfigurationError(
                f"provider {name!r} is registered with capabilities [{declared}] "
                f"but reports [{reported}]"
            )
        return provider


@attrs.frozen
class ConformanceTarget:
    """An offline target the conformance suite can run against without code.

    ``open`` receives a scratch directory that lives for the whole run and
    returns an async context manager yielding a fresh :class:`Provider` each
    time it is entered (a fake service, a temporary base directory, ...).
    Entering it again with the same directory must give a provider that
    attaches to what earlier ones created (a simulated worker restart).
    """

    provider: str = attrs.field(validator=_name)
    open: Callable[[Path], AbstractAsyncContextManager[Provider]] = attrs.field(repr=False)
    description: str = ""
    cost: TargetCost = attrs.field(default=TargetCost.PROCESS, converter=TargetCost)
    """What one operation costs; the suite's profiles size the lifecycle machine by it."""
    testbed: Callable[[Path], AbstractAsyncContextManager[ConformanceTestbed]] | None = attrs.field(
        default=None, repr=False
    )
    """Opens what the capability checks need beside the providers (see :mod:`mango.domain.testbed`).

    Entered like ``open``: with the same scratch directory, on the same event
    loop, while providers of that directory may be open. ``None``: the
    target has none, and a declared capability whose checks need one fails
    them unless :attr:`waivers` names it.
    """
    waivers: tuple[tuple[Capability, str], ...] = attrs.field(default=(), converter=_waivers)
    """Declared capabilities whose checks cannot run against this target, each with a reason.

    Given as a mapping (``{Capability.PACKAGE_SETUP: "the fake has no package
    manager"}``). The suite reports each as a waiver in its verdict, never as
    a silent skip; the capability stays declared and admitted.
    """

    def waiver(self, capability: Capability) -> str | None:
        """The reason ``capability``'s checks are waived for this target, or None."""
        return dict(self.waivers).get(capability)


@attrs.define
class ConformanceTargetRegistry:
    """Targets collected from plugins through ``mango_register_conformance_targets``."""

    _targets: dict[str, ConformanceTarget] = attrs.field(factory=dict, alias="_targets")

    def add(self, target: ConformanceTarget) -> None:
        """Add one target; a duplicate provider name is an error."""
        if target.provider in self._targets:
            raise ConfigurationError(f"conformance target {target.provider!r} is registered twice")
        self._targets[target.provider] = target

    def names(self) -> tuple[str, ...]:
        """Sorted provider names with a target."""
        return tuple(sorted(self._targets))

    def get(self, name: str) -> ConformanceTarget:
        """The target for ``name``; :class:`UnknownProvider` lists those available."""
        try:
            return self._targets[name]
        except KeyError:
            raise UnknownProvider(name, self.names()) from None
