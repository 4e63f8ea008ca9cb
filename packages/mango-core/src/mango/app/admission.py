"""Admission: may this environment run on that provider? Every reason, before anything is written.

One function, :func:`admit_environment`, is what every path calls before it
writes a Session row, an intent or a workflow: the Python API
(``SessionManager.ensure_session(id, spec)`` and ``acquire``), ``mango exec``
directly and with ``--via-temporal`` (the client, before it starts anything),
and the worker again before it provisions. It reads only the provider's
*declared* capabilities (its registration): no provider is constructed and
no credential read. An environment given as loose fields (a profile,
command-line options) is built here too, so a bad host and a missing
capability are reported in one error.
"""

from __future__ import annotations

from collections.abc import Iterable

from mango.domain.capabilities import Capability, CapabilitySet, admission_reasons
from mango.domain.environments import SpecFields, spec_from_fields
from mango.domain.errors import AdmissionRejected, CapabilityNotSupported
from mango.domain.values import SandboxSpec

__all__ = ["admit_environment"]


def admit_environment(
    provider: str,
    capabilities: CapabilitySet,
    environment: SandboxSpec | SpecFields,
    resources: Iterable[Capability] = (),
) -> SandboxSpec:
    """The spec of ``environment`` if ``provider`` (declaring ``capabilities``) can run it.

    ``environment`` is a built :class:`SandboxSpec` or loose fields
    (:func:`~mango.domain.environments.spec_from_fields`); ``resources`` the
    resource capabilities the Session needs (file resources, outputs, ...).
    Raises :class:`CapabilityNotSupported` when a reason is a capability the
    provider does not declare, else :class:`AdmissionRejected`; either way
    ``reasons`` lists every problem of the fields and every missing capability.
    """
    problems: tuple[str, ...] = ()
    if isinstance(environment, SandboxSpec):
        spec = environment
    else:
        spec, problems = spec_from_fields(environment)
    found: list[tuple[str, bool]] = [(text, False) for text in problems]
    found += admission_reasons(provider, capabilities, spec, resources)
    if not found:
        return spec
    texts = [text for text, _ in found]
    hint = (
        "choose a provider that declares it (mango providers lists them) or drop it from the "
        "environment"
    )
    if any(is_capability for _, is_capability in found):
        raise CapabilityNotSupported(provider, texts, hint=hint)
    raise AdmissionRejected(provider, texts, hint="fix the environment's fields")
