"""The mango provider conformance suite: a pytest plugin with a Hypothesis state machine.

A provider author subclasses :class:`ProviderSuite` once and returns a
:class:`~mango.domain.registry.ConformanceTarget` from the
``conformance_target`` fixture::

    import pytest
    import mango_conformance

    class TestAcmeProvider(mango_conformance.ProviderSuite):
        @pytest.fixture
        def conformance_target(self):
            return mango_conformance.provider_target("acme", lambda scratch: Acme(scratch))

The pytest plugin (entry point ``pytest11``) only registers options, markers
and Hypothesis profiles until a suite class is collected.
"""

from mango_conformance.bridge import AsyncBridge, SlowOperation
from mango_conformance.harness import Harness
from mango_conformance.ledger import Leak, LeakLedger, current_ledger
from mango_conformance.machine import LifecycleMachine, MachineLimits
from mango_conformance.options import SuiteOptions, live_enabled, live_env_var
from mango_conformance.profiles import PROFILES, Profile, machine_settings
from mango_conformance.suite import ProviderSuite
from mango_conformance.targets import provider_target

__all__ = [
    "PROFILES",
    "AsyncBridge",
    "Harness",
    "Leak",
    "LeakLedger",
    "LifecycleMachine",
    "MachineLimits",
    "Profile",
    "ProviderSuite",
    "SlowOperation",
    "SuiteOptions",
    "current_ledger",
    "live_enabled",
    "live_env_var",
    "machine_settings",
    "provider_target",
]
