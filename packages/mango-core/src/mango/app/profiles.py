"""Environment profiles: named environments in configuration, resolved one way everywhere.

A profile is a TOML table under ``[profiles.NAME]`` in the file that
``MANGO_PROFILES_FILE`` names, with the keys of
:data:`~mango.domain.environments.ENVIRONMENT_KEYS`::

    [profiles.cloud]
    timeout = 120
    network = "bridge"

    [profiles.cloud.packages]
    apt = ["jq"]
    pip = ["requests==2.32.3"]

One profile ships with mango, ``cloud``: the defaults of a hosted agent
sandbox (a 120 s command timeout, bridge networking, no packages); a
``[profiles.cloud]`` table in the file replaces it. ``mango exec --profile``,
the Python API (``mango.resolve_spec``) and ``mango worker`` (which checks
every profile against its provider at start) resolve profiles with
:func:`environment_fields`, so the client's admission and the worker's agree
on one spec.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from mango.domain.environments import SpecFields, merge_fields, parse_package
from mango.domain.errors import ConfigurationError, InvalidInput

__all__ = ["BUILTIN_PROFILES", "Profiles", "environment_fields", "load_profiles", "parse_profiles"]

BUILTIN_PROFILES: Mapping[str, SpecFields] = MappingProxyType(
    {"cloud": MappingProxyType({"timeout": 120, "network": "bridge"})}
)
"""The profiles every deployment has (the configuration file may replace them)."""


def _frozen(entries: Mapping[str, SpecFields]) -> Mapping[str, SpecFields]:
    return MappingProxyType({**BUILTIN_PROFILES, **entries})


@attrs.frozen
class Profiles:
    """The profiles of one configuration: the built-in ones and the file's."""

    entries: Mapping[str, SpecFields] = attrs.field(factory=dict, converter=_frozen)
    source: str = "built-in profiles"
    """Where they came from, for messages (the file's path)."""

    def names(self) -> tuple[str, ...]:
        """Every profile's name, sorted."""
        return tuple(sorted(self.entries))

    def fields(self, name: str) -> SpecFields:
        """The environment of profile ``name``; :class:`InvalidInput` naming the known ones."""
        try:
            return self.entries[name]
        except KeyError:
            raise InvalidInput(
                f"no environment profile {name!r} in {self.source} "
                f"(profiles: {', '.join(self.names())})",
                hint="define it under [profiles.NAME] in the file MANGO_PROFILES_FILE names",
            ) from None


def parse_profiles(text: str, source: str) -> Profiles:
    """The profiles of a TOML document; :class:`ConfigurationError` if it is malformed."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{source} is not valid TOML: {exc}") from None
    unknown = sorted(set(document) - {"profiles"})
    if unknown:
        raise ConfigurationError(f"{source}: unknown tables {unknown} (only [profiles.NAME])")
    tables = document.get("profiles", {})
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise ConfigurationError(f"{source}: each profile must be a table [profiles.NAME]")
    return Profiles(dict(tables), source)


def load_profiles(path: Path | None) -> Profiles:
    """The profiles of the file at ``path`` (``None``: the built-in ones only)."""
    if path is None:
        return Profiles()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the profiles file {path}: {exc.strerror or exc}",
            hint="fix MANGO_PROFILES_FILE or unset it",
        ) from None
    return parse_profiles(text, str(path))


def environment_fields(
    profiles: Profiles,
    profile: str | None = None,
    *,
    defaults: SpecFields | None = None,
    packages: Iterable[str] = (),
    overrides: SpecFields | None = None,
) -> dict[str, Any]:
    """One environment from, in order: ``defaults``, the profile, ``overrides``, ``packages``.

    ``packages`` are ``MANAGER:NAME`` texts (``pip:requests==2.32.3``); they
    join the profile's lists. Raises :class:`InvalidInput` for an unknown
    profile or a malformed package text; the fields themselves are checked by
    admission (:func:`mango.app.admission.admit_environment`).
    """
    fields: dict[str, Any] = dict(defaults or {})
    if profile is not None:
        fields = merge_fields(fields, profiles.fields(profile))
    fields = merge_fields(fields, overrides or {})
    plan: dict[str, list[str]] = {}
    for text in packages:
        manager, name = parse_package(text)
        plan.setdefault(manager, []).append(name)
    if plan:
        fields = merge_fields(fields, {"packages": plan})
    return fields
