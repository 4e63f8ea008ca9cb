"""The pytest plugin itself, exercised with pytester: options, inertness, waivers, strictness."""

from __future__ import annotations

import pytest
from hypothesis import settings

from mango_conformance.profiles import PROFILES, hypothesis_profile_name

pytest_plugins = ["pytester"]

LOCAL_SUITE = """
import pytest
from mango.plugins import load_plugins
from mango_conformance import ProviderSuite


class TestLocal(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return load_plugins(entry_points=False).conformance_targets().get("local")
"""

LEAKY_SUITE = """
import pytest
from conformance_mutants import WrappedProvider, WrappedSandbox
from mango_conformance import ProviderSuite, provider_target


class StuckSandbox(WrappedSandbox):
    async def destroy(self):
        raise RuntimeError("the backend refuses to delete")


class Stuck(WrappedProvider):
    sandbox_class = StuckSandbox


class TestLeaky(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return provider_target("local", Stuck)
"""


def test_options_and_markers_are_registered(suite_pytester: pytest.Pytester) -> None:
    """``--help`` lists the options and ``--markers`` the markers."""
    help_text = suite_pytester.runpytest("--help").stdout.str()
    for option in (
        "--mango-profile",
        "--mango-strict",
        "--mango-waivers",
        "--mango-max-examples",
        "--mango-steps",
        "--mango-no-shrink",
        "--mango-hypothesis-db",
    ):
        assert option in help_text
    markers = suite_pytester.runpytest("--markers").stdout.str()
    for marker in ("mango_conformance", "mango_parity", "mango_stateful", "mango_capability"):
        assert f"@pytest.mark.{marker}" in markers


def test_plugin_is_inert_without_a_suite(suite_pytester: pytest.Pytester) -> None:
    """A project that never subclasses the suite sees no report, no waiver use, no failure."""
    suite_pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    waivers = suite_pytester.makefile(".txt", waivers="test_nothing_matches  # stale on purpose\n")
    result = suite_pytester.runpytest("--mango-strict", f"--mango-waivers={waivers}")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert " mango-conformance =" not in result.stdout.str()


def test_waivers_skip_and_stale_ones_are_reported(suite_pytester: pytest.Pytester) -> None:
    """A waived check is skipped with its reason; a waiver matching nothing is reported."""
    suite_pytester.makepyfile(test_local=LOCAL_SUITE)
    waivers = suite_pytester.makefile(
        ".txt",
        waivers="# known gaps\ntest_l01_provider  # tracked in ACME-1\ntest_gone  # stale one\n",
    )
    result = suite_pytester.runpytest("-k", "l01 or l02c", f"--mango-waivers={waivers}", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*waived: test_local.py::TestLocal::test_l01_provider_name_is_stable: tracked*",
            "*stale waiver 'test_gone' (line 3) matches no test*",
            "*conformant with 1 waiver(s)*",
            "SKIPPED*waived: tracked in ACME-1",
        ]
    )
    assert result.ret == pytest.ExitCode.OK


def test_strict_mode_fails_on_stale_waivers(suite_pytester: pytest.Pytester) -> None:
    """With ``--mango-strict`` a stale waiver fails an otherwise green run."""
    suite_pytester.makepyfile(test_local=LOCAL_SUITE)
    waivers = suite_pytester.makefile(".txt", waivers="test_gone  # stale\n")
    result = suite_pytester.runpytest("-k", "l01", f"--mango-waivers={waivers}", "--mango-strict")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*--mango-strict: failing the run (0 leak(s), 1 stale waiver(s))*"]
    )


def test_waiver_without_reason_is_a_usage_error(suite_pytester: pytest.Pytester) -> None:
    """Every waiver needs a reason."""
    waivers = suite_pytester.makefile(".txt", waivers="test_l01\n")
    result = suite_pytester.runpytest(f"--mango-waivers={waivers}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "has no reason" in result.stderr.str()


def test_leaks_are_reported_and_fail_strict_runs(suite_pytester: pytest.Pytester) -> None:
    """A sandbox that cannot be destroyed is reported; strict mode fails the run on it."""
    suite_pytester.makepyfile(test_leaky=LEAKY_SUITE)
    relaxed = suite_pytester.runpytest("-k", "l02c")
    relaxed.assert_outcomes(passed=1)
    assert relaxed.ret == pytest.ExitCode.OK
    relaxed.stdout.fnmatch_lines(["*LEAK: local key='sc-*the backend refuses to delete*"])
    strict = suite_pytester.runpytest("-k", "l02c", "--mango-strict")
    strict.assert_outcomes(passed=1)
    assert strict.ret == pytest.ExitCode.TESTS_FAILED


def test_profile_comes_from_the_environment(
    suite_pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``MANGO_CONFORMANCE_PROFILE`` selects the profile; an unknown one is a usage error."""
    suite_pytester.makepyfile(test_local=LOCAL_SUITE)
    monkeypatch.setenv("MANGO_CONFORMANCE_PROFILE", "offline-ci")
    result = suite_pytester.runpytest("-k", "l01")
    result.stdout.fnmatch_lines(["*profile offline-ci; provider(s): local*"])
    monkeypatch.setenv("MANGO_CONFORMANCE_PROFILE", "fast")
    assert suite_pytester.runpytest("-k", "l01").ret == pytest.ExitCode.USAGE_ERROR


def test_example_database_is_per_provider_and_profile(suite_pytester: pytest.Pytester) -> None:
    """A failing machine example is saved under <db>/<provider>-<profile>, not shared."""
    suite_pytester.makepyfile(
        test_wrong_ref="""
import pytest
from conformance_mutants import WrappedProvider, WrappedSandbox
from mango.domain.values import SandboxRef
from mango_conformance import ProviderSuite, provider_target


class WrongRefSandbox(WrappedSandbox):
    @property
    def ref(self):
        return SandboxRef("elsewhere", self.inner.ref.external_id)


class WrongRef(WrappedProvider):
    sandbox_class = WrongRefSandbox


class TestWrongRef(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return provider_target("local", WrongRef)
"""
    )
    database = suite_pytester.path / "examples"
    result = suite_pytester.runpytest(
        "-k",
        "state_machine",
        "--mango-profile=offline-dev",
        "--mango-no-shrink",
        f"--mango-hypothesis-db={database}",
    )
    result.assert_outcomes(failed=1)
    assert [path.name for path in database.iterdir()] == ["local-offline-dev"]
    assert any(path.is_file() for path in (database / "local-offline-dev").rglob("*"))


def test_missing_target_fixture_is_a_clear_error(suite_pytester: pytest.Pytester) -> None:
    """Forgetting to override ``conformance_target`` says what to do."""
    suite_pytester.makepyfile(
        test_bare="from mango_conformance import ProviderSuite\n\n"
        "class TestBare(ProviderSuite):\n    pass\n"
    )
    result = suite_pytester.runpytest("-k", "l01")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*TestBare must override the conformance_target fixture*"])


def test_capabilities_select_groups(suite_pytester: pytest.Pytester) -> None:
    """A declared capability's checks run (and fail here: the local sandbox lacks them).

    A declared capability whose sandboxes lack its protocol fails its
    protocol check and its behaviour checks; an undeclared one skips as
    'not declared'.
    """
    suite_pytester.makepyfile(
        test_caps="""
import pytest
from mango.domain.capabilities import Capability, CapabilitySet
from conformance_mutants import WrappedProvider
from mango_conformance import ProviderSuite, provider_target


class Claims(WrappedProvider):
    @property
    def capabilities(self):
        return CapabilitySet.of(Capability.FILE_RESOURCES, Capability.SKILL_BUNDLES)


class TestClaims(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return provider_target("local", Claims)
"""
    )
    result = suite_pytester.runpytest(
        "-k", "file_resources or skill_bundles or session_outputs", "-rs"
    )
    result.assert_outcomes(failed=8, skipped=5)
    result.stdout.fnmatch_lines_random(
        [
            "*test_file_resources_protocol*does not implement FileResourceSandbox*",
            "*test_file_resources_lifecycle*is not a FileResourceSandbox*",
            "*test_skill_bundles_protocol*does not implement SkillBundleSandbox*",
            "*test_skill_bundles_import*is not a SkillBundleSandbox*",
            "*not declared: local does not declare session-outputs*",
        ]
    )


def test_live_targets_need_their_gate(
    suite_pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live target is skipped unless MANGO_LIVE_<NAME>=1, and then runs a live profile."""
    suite_pytester.makepyfile(
        test_live=LOCAL_SUITE
        + """
    @pytest.fixture
    def conformance_options(self):
        from mango_conformance import SuiteOptions
        return SuiteOptions(live=True)
"""
    )
    monkeypatch.delenv("MANGO_LIVE_LOCAL", raising=False)
    gated = suite_pytester.runpytest("-k", "l01", "-rs")
    gated.assert_outcomes(skipped=1)
    gated.stdout.fnmatch_lines(["*live run of local: set MANGO_LIVE_LOCAL=1*"])
    monkeypatch.setenv("MANGO_LIVE_LOCAL", "1")
    opened = suite_pytester.runpytest("-k", "l01 or state_machine", "--mango-steps=3")
    opened.assert_outcomes(passed=2)


def test_hypothesis_profiles_are_registered_not_loaded() -> None:
    """Each profile is registered with Hypothesis under its own name and none is loaded."""
    for profile in PROFILES.values():
        registered = settings.get_profile(hypothesis_profile_name(profile))
        assert registered.max_examples == profile.max_examples
        assert registered.stateful_step_count == profile.stateful_steps
        assert registered.deadline is None
    assert not settings.get_current_profile_name().startswith("mango-conformance")


DECLARED_MODULE = """
import pytest
from mango.provider import Capability, ConformanceTarget
from mango_provider_opensandbox.conformance import open_conformance_provider
from mango_conformance import ProviderSuite


class TestNoTestbed(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return ConformanceTarget(provider="opensandbox", open=open_conformance_provider)


class TestWaived(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return ConformanceTarget(
            provider="opensandbox",
            open=open_conformance_provider,
            waivers={
                Capability.LIMITED_NETWORK: "no hosts to probe here",
                Capability.PACKAGE_SETUP: "no package source here",
            },
        )
"""


def test_a_declared_capability_is_checked_or_waived_never_skipped(
    suite_pytester: pytest.Pytester,
) -> None:
    """Without testbed or waiver the behavioural checks fail; a target's waiver is reported."""
    suite_pytester.makepyfile(test_declared=DECLARED_MODULE)
    selection = "limited_network or package_setup"
    result = suite_pytester.runpytest("-k", selection, "-rs")
    # Each class: the protocol check passes; the six behavioural ones fail or are waived.
    result.assert_outcomes(passed=2, failed=6, skipped=6)
    result.stdout.fnmatch_lines_random(
        [
            (
                "failed: test_limited_network_drift_is_repaired_on_attach: Failed: opensandbox "
                "declares limited-network, but its conformance target supplies no network testbed*"
            ),
            (
                "failed: test_package_setup_installs_in_order: Failed: opensandbox declares "
                "package-setup, but its conformance target supplies no package source*"
            ),
            (
                "waived: test_declared.py::TestWaived::test_limited_network_drift_is_repaired_on_"
                "attach: limited-network waived by the opensandbox target: no hosts to probe here"
            ),
            (
                "waived: test_declared.py::TestWaived::test_package_setup_installs_in_order: "
                "package-setup waived by the opensandbox target: no package source here"
            ),
            "NOT conformant: 6 check(s) failed (*)",
        ]
    )
    waived = suite_pytester.runpytest("-k", f"TestWaived and ({selection})")
    waived.assert_outcomes(passed=1, skipped=6)
    waived.stdout.fnmatch_lines(
        ["conformant with 6 waiver(s): 1 check(s) passed, 6 skipped (6 waived), * deselected *"]
    )
