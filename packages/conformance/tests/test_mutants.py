"""Every mutant provider (one defect each) is caught by the suite."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow  # each runs the suite (or part of it) against a mutant

MUTANT_MODULE = """
import pytest
from conformance_mutants import target_for
from mango_conformance import ProviderSuite


class TestMutant(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return target_for({name!r})
"""

MACHINE = "test_lifecycle_state_machine"
RECONNECT = "test_background_processes_reconnect_from_a_fresh_provider"
WAIT = "test_background_processes_wait_exit_and_unknown_ids"
TREE = "test_background_processes_kill_ends_the_whole_tree"
DESTROY = "test_background_processes_die_with_their_sandbox"

CAUGHT_BY: dict[str, set[str]] = {
    "non-idempotent-create": {
        "test_l03a_create_is_idempotent_across_instances",
        "test_l03b_recreate_preserves_workspace",
        MACHINE,
    },
    "attach-skips-ownership": {
        "test_l04a_foreign_session_key_is_permanent",
        "test_l04b_wrong_provider_name_is_permanent",
        MACHINE,
    },
    "destroy-fails-second-time": {"test_l05ab_destroy_is_idempotent", MACHINE},
    "not-found-is-generic": {"test_l05c_attach_after_destroy_is_not_found", MACHINE},
    "cancellation-ignored": {
        "test_cancel_mid_flight_kills_process_tree",
        "test_cancel_at_first_suspension_raises_cancelled",
        MACHINE,
    },
    "unbounded-output": {"test_output_is_bounded_and_flagged"},
    "unbounded-read": {
        "test_read_bound_is_checked_before_reading",
        "test_read_at_and_past_the_bound",
    },
    "buffered-write-stream": {"test_write_stream_moves_a_large_stream_exactly"},
    "non-atomic-write-stream": {
        "test_failed_write_stream_keeps_the_old_file",
        "test_cancelled_write_stream_keeps_the_old_file",
    },
    "write-stream-checks-late": {"test_write_stream_refuses_what_write_file_refuses"},
    "write-does-not-truncate": {
        "test_overwrite_truncates",
        "test_empty_file_round_trip",
        MACHINE,
    },
    "escape-allowed": {
        "test_l02f_escape_is_rejected",
        "test_absolute_and_dotdot_paths_are_rejected",
        MACHINE,
    },
    "stderr-merged": {"test_output_is_bounded_and_flagged"},
    "leader-only-kill": {
        "test_timeout_sets_timed_out_and_kills_tree",
        "test_cancel_mid_flight_kills_process_tree",
    },
    "stream-after-exit": {"test_stream_delivers_output_before_the_command_ends"},
    "stream-leaves-orphans": {"test_leaving_the_stream_early_kills_the_tree"},
    "exec-ignores-exit-codes": {
        "test_l02d_non_zero_exit_is_data",
        "test_missing_program_reports_command_not_found",
        "test_stream_parity_non_zero_exit",
        MACHINE,
    },
    "process-ids-not-durable": {RECONNECT},
    "process-logs-ignore-offset": {RECONNECT},
    "process-stdin-dropped": {RECONNECT},
    "process-wait-timeout-raises": {WAIT},
    "process-kill-leader-only": {TREE},
    "unknown-process-id-untyped": {WAIT},
    "processes-outlive-destroy": {DESTROY},
}
"""For each mutant, the checks that must fail on it (others may fail too)."""

NETWORK_AND_PACKAGES = "limited_network or package_setup"
"""The checks the OpenSandbox mutants are run with (the rest would take minutes each)."""

NETWORK_CHECKS = {
    "test_limited_network_empty_allowlist_blocks_egress",
    "test_limited_network_allowlisted_host_is_reachable",
    "test_limited_network_replacing_the_list_is_idempotent",
    "test_limited_network_drift_is_repaired_on_attach",
}
PACKAGE_CHECKS = {
    "test_package_setup_installs_in_order",
    "test_package_setup_failure_is_reported_and_keeps_the_sandbox",
}

REMOTE_CAUGHT_BY: dict[str, set[str]] = {
    # Package setup needs the setup allowlist to reach the mirror: no allowlist, no packages.
    "allowlist-ignored": NETWORK_CHECKS | PACKAGE_CHECKS,
    "allowlist-merged": {
        "test_limited_network_empty_allowlist_blocks_egress",
        "test_limited_network_replacing_the_list_is_idempotent",
    },
    "drift-not-repaired": {"test_limited_network_drift_is_repaired_on_attach"},
    # Created without a policy, the sandbox refuses every allowlist (never "restricted" later).
    "limited-created-unrestricted": NETWORK_CHECKS | PACKAGE_CHECKS,
    "package-failure-swallowed": {"test_package_setup_failure_is_reported_and_keeps_the_sandbox"},
    # install before update: even the failing plan fails on its first (installable) package.
    "packages-out-of-order": PACKAGE_CHECKS,
    "image-reset-on-attach": {"test_package_setup_installs_in_order"},
}
"""The OpenSandbox mutants (on its fake) and the network and package checks that catch them."""


@pytest.mark.parametrize("mutant", sorted(CAUGHT_BY))
def test_mutant_is_caught(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
    mutant: str,
) -> None:
    """The named checks fail against the mutant, and the run as a whole fails.

    Only the named checks run: the others are not asserted on here (they may
    fail too), and against a mutant many of them wait out their whole bound
    before failing (``test_ignored_exit_codes_fail_only_the_exit_code_checks``
    runs the whole suite against one mutant and pins every outcome).
    """
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name=mutant))
    only = ["-k", " or ".join(sorted(CAUGHT_BY[mutant]))]
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "--mango-no-shrink", *only)
    found = outcomes(result)
    escaped = {name for name in CAUGHT_BY[mutant] if found.get(name) != "failed"}
    assert not escaped, f"{mutant} was not caught by: {sorted(escaped)}"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


STAT = "test_file_api_stat_exists_and_listing"
BOUNDED = "test_file_api_listing_is_bounded"
MAKE_REMOVE = "test_file_api_make_dir_and_remove"
RENAME = "test_file_api_rename"
ESCAPES = "test_file_api_refuses_escapes_and_the_root"

FILE_API_CAUGHT_BY: dict[str, set[str]] = {
    "stat-follows-links": {STAT},
    "listing-follows-links": {STAT},
    "listing-unbounded": {BOUNDED},
    "listing-keeps-the-last": {BOUNDED},
    "remove-ignores-recursive": {MAKE_REMOVE},
    "remove-follows-links": {MAKE_REMOVE},
    "rename-replaces": {RENAME},
    "make-dir-always-parents": {MAKE_REMOVE},
    "parent-links-followed": {ESCAPES},
    "root-removable": {ESCAPES},
    "listing-clamps-limits": {BOUNDED},
    "mode-with-type-bits": {STAT},
    "mtime-at-epoch": {STAT},
    "make-dir-through-links": {MAKE_REMOVE},
}
"""The file-api mutants of the local provider and the checks that must catch each."""

FILE_API_CONTROLS = ("file-api-unchanged", "file-api-through-exec")
"""Must pass every file-api check: the unchanged wrapper, and the kit's exec fallback
(``ExecFileSystem``) over the local provider's exec, which runs the group's rules on
the host's coreutils as the Docker provider runs them on busybox."""

FILE_API_MODULE = """
import pytest
from conformance_mutants import target_for
from mango_conformance import ProviderSuite
"""

FILE_API_CLASS = """

class TestMutant{ident}(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return target_for({name!r})
"""


def test_file_api_mutants_are_caught(suite_pytester: pytest.Pytester) -> None:
    """Each file-api mutant fails its checks; the two controls pass them all.

    One run for all of them (a test class each), since the group is cheap on
    local and a run per mutant would cost its start-up ten times.
    """
    names = [*sorted(FILE_API_CAUGHT_BY), *FILE_API_CONTROLS]
    classes = "".join(
        FILE_API_CLASS.format(ident=index, name=name) for index, name in enumerate(names)
    )
    suite_pytester.makepyfile(test_mutant=FILE_API_MODULE + classes)
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", "test_file_api")
    found: dict[tuple[str, str], str] = {}
    for report in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        cls, test = report.nodeid.split("::")[-2:]
        if report.when == "call" or report.outcome != "passed":
            found[names[int(cls.removeprefix("TestMutant"))], test] = report.outcome
    checks = set().union(*FILE_API_CAUGHT_BY.values())
    for name in FILE_API_CONTROLS:
        control = {test: found.get((name, test)) for test in checks}
        assert control == dict.fromkeys(checks, "passed"), (name, control)
    escaped = {
        mutant: sorted(test for test in tests if found.get((mutant, test)) != "failed")
        for mutant, tests in FILE_API_CAUGHT_BY.items()
    }
    assert {mutant: tests for mutant, tests in escaped.items() if tests} == {}


RESOURCES = "file_resources or session_outputs"
"""The checks the Docker mutants are run with."""

LIFECYCLE = "test_file_resources_lifecycle"
READ_ONLY = "test_file_resources_are_read_only_even_to_root"
ATOMIC = "test_file_resources_replace_atomically"
INTERRUPTED = "test_file_resources_removal_is_idempotent_after_an_interruption"
ONE_ROOT = "test_session_outputs_tools_and_shell_see_one_root"
REPEATABLE = "test_session_outputs_export_is_repeatable_under_the_lock"
STREAMS = "test_session_outputs_export_streams"
HOSTILE = "test_session_outputs_hostile_entries_are_rejected"

DOCKER_CAUGHT_BY: dict[str, set[str]] = {
    "uploads-in-workspace": {READ_ONLY},
    "import-in-place": {ATOMIC},
    "removal-ignores-identity": {LIFECYCLE},
    "removal-not-idempotent": {LIFECYCLE, INTERRUPTED},
    "export-consumes": {REPEATABLE},
    "export-buffered": {STREAMS},
    "export-follows-links": {HOSTILE},
    "tools-see-another-root": {ONE_ROOT},
}
"""The Docker mutants and the file-resource and output checks that must catch them."""

PAUSE_AND_PORTS = "pause or exposed_port"
"""The checks the pause and exposed-ports mutants are run with."""

KEEPS = "test_pause_keeps_the_workspace"
FROZEN = "test_paused_sandbox_runs_nothing_until_resumed"
IDEMPOTENT = "test_pause_and_resume_are_idempotent"
FRESH = "test_a_fresh_provider_sees_the_pause"
REACHED = "test_exposed_port_reaches_a_server_in_the_sandbox"

PAUSE_CAUGHT_BY: dict[str, set[str]] = {
    # The container runs on: the frozen command sees "go" and a fresh instance sees no pause.
    "pause-is-a-flag": {FROZEN, FRESH},
    "resume-not-idempotent": {IDEMPOTENT},
    "resume-loses-workspace": {KEEPS},
    "port-url-wrong": {REACHED},
    "port-outlives-sandbox": {REACHED},
}
"""The pause and exposed-ports mutants (Docker) and the checks that must fail on each."""


SKILLS = "skill_bundles"
"""The checks the skill mutants are run with."""
SKILL_IMPORT = "test_skill_bundles_import"
SKILL_FAILED = "test_skill_bundles_failed_imports_are_never_visible"

SKILL_CAUGHT_BY: dict[str, set[str]] = {
    "skill-unverified": {SKILL_FAILED},
    "skill-extract-in-place": {SKILL_FAILED},
    "skill-drops-exec-bits": {SKILL_IMPORT},
    "skill-state-in-memory": {SKILL_IMPORT},
}
"""The Docker skill mutants and the skill-bundles checks that must catch them."""

MEMORY_ROUND_TRIP = "test_memory_stores_round_trip"
MEMORY_READ_ONLY = "test_memory_stores_read_only_even_to_root"
MEMORY_LOCK = "test_memory_stores_sync_lock_excludes_tools"

DOCKER_MEMORY_CAUGHT_BY: dict[str, set[str]] = {
    "memory-read-only-writable": {MEMORY_READ_ONLY},
    "memory-replace-keeps-stale": {MEMORY_ROUND_TRIP},
    "memory-lock-ignores-tools": {MEMORY_LOCK},
}
"""The Docker mutants of Memory Stores and the memory-stores checks that must catch them."""


@pytest.fixture
async def docker_daemon() -> None:
    """The local daemon with the conformance image, else a skip (a failure when required).

    Without it every check would fail, which would make each mutant look caught.
    """
    import os

    from mango.domain.errors import MangoError
    from mango_provider_docker import Engine
    from mango_provider_docker.conformance import CONFORMANCE_IMAGE

    engine = Engine(os.environ.get("DOCKER_HOST", "").strip() or None)
    try:
        ready = await engine.image_exists(CONFORMANCE_IMAGE)
    except MangoError:
        ready = False
    finally:
        await engine.aclose()
    if not ready:
        if os.environ.get("MANGO_REQUIRE_DOCKER", "") == "1":
            pytest.fail(f"no Docker Engine with {CONFORMANCE_IMAGE} (MANGO_REQUIRE_DOCKER=1)")
        pytest.skip(f"no Docker Engine with {CONFORMANCE_IMAGE}")


@pytest.mark.docker
@pytest.mark.usefixtures("docker_daemon")
@pytest.mark.parametrize("mutant", sorted(DOCKER_CAUGHT_BY))
def test_resource_mutant_is_caught(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
    mutant: str,
) -> None:
    """Each Docker mutant fails the file-resource or output checks named for it."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name=mutant))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", RESOURCES)
    found = outcomes(result)
    escaped = {name for name in DOCKER_CAUGHT_BY[mutant] if found.get(name) != "failed"}
    assert not escaped, f"{mutant} was not caught by: {sorted(escaped)} ({found})"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.docker
@pytest.mark.usefixtures("docker_daemon")
@pytest.mark.parametrize("mutant", sorted(PAUSE_CAUGHT_BY))
def test_pause_or_port_mutant_is_caught(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
    mutant: str,
) -> None:
    """The pause or exposed-ports checks named for each Docker mutant fail (only they run)."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name=mutant))
    only = " or ".join(sorted(PAUSE_CAUGHT_BY[mutant]))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", only)
    found = outcomes(result)
    escaped = {name for name in PAUSE_CAUGHT_BY[mutant] if found.get(name) != "failed"}
    assert not escaped, f"{mutant} was not caught by: {sorted(escaped)} ({found})"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.docker
@pytest.mark.usefixtures("docker_daemon")
@pytest.mark.parametrize("mutant", sorted(SKILL_CAUGHT_BY))
def test_skill_mutant_is_caught(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
    mutant: str,
) -> None:
    """Each Docker skill mutant fails the skill-bundles checks named for it."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name=mutant))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", SKILLS)
    found = outcomes(result)
    escaped = {name for name in SKILL_CAUGHT_BY[mutant] if found.get(name) != "failed"}
    assert not escaped, f"{mutant} was not caught by: {sorted(escaped)} ({found})"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.docker
@pytest.mark.usefixtures("docker_daemon")
def test_unchanged_docker_wrapper_passes_the_pause_and_port_checks(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
) -> None:
    """The control: the wrapper with no defect passes every pause and exposed-ports check."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name="docker-unchanged"))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", PAUSE_AND_PORTS)
    found = outcomes(result)
    checks = set().union(*PAUSE_CAUGHT_BY.values())
    assert {name: found.get(name) for name in checks} == dict.fromkeys(checks, "passed")
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.docker
@pytest.mark.usefixtures("docker_daemon")
def test_unchanged_docker_wrapper_passes_the_resource_checks(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
) -> None:
    """The control: the same wrapper with no defect passes every check the mutants fail."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name="docker-unchanged"))
    result = suite_pytester.runpytest(
        "--mango-profile=offline-ci", "-k", f"{RESOURCES} or {SKILLS} or memory_stores"
    )
    found = outcomes(result)
    checks = set().union(
        *DOCKER_CAUGHT_BY.values(), *SKILL_CAUGHT_BY.values(), *DOCKER_MEMORY_CAUGHT_BY.values()
    )
    assert {name: found.get(name) for name in checks} == dict.fromkeys(checks, "passed")
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.docker
@pytest.mark.usefixtures("docker_daemon")
@pytest.mark.parametrize("mutant", sorted(DOCKER_MEMORY_CAUGHT_BY))
def test_memory_mutant_is_caught(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
    mutant: str,
) -> None:
    """Each Memory Store mutant fails the memory-stores check named for it (control below)."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name=mutant))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", "memory_stores")
    found = outcomes(result)
    escaped = {name for name in DOCKER_MEMORY_CAUGHT_BY[mutant] if found.get(name) != "failed"}
    assert not escaped, f"{mutant} was not caught by: {sorted(escaped)} ({found})"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("mutant", sorted(REMOTE_CAUGHT_BY))
def test_network_and_package_mutant_is_caught(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
    mutant: str,
) -> None:
    """Exactly the named network and package checks fail against the OpenSandbox mutant."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name=mutant))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", NETWORK_AND_PACKAGES)
    found = outcomes(result)
    failed = {name for name, outcome in found.items() if outcome == "failed"}
    assert failed == REMOTE_CAUGHT_BY[mutant], f"{mutant}: {found}"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_unchanged_opensandbox_wrapper_passes_network_and_package_checks(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
) -> None:
    """The control: the same wrapper with no defect passes every check the mutants fail."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name="opensandbox-unchanged"))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", NETWORK_AND_PACKAGES)
    found = outcomes(result)
    checks = set().union(*REMOTE_CAUGHT_BY.values())
    assert {name: found.get(name) for name in checks} == dict.fromkeys(checks, "passed")
    assert result.ret == pytest.ExitCode.OK


QUIRK_MODULE = """
import pytest
from conformance_mutants import target_for
from mango_conformance import ProviderSuite, SuiteOptions


class TestMutant(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return target_for({name!r})

    @pytest.fixture
    def conformance_options(self):
        return SuiteOptions(declared_quirks=[{quirk!r}])
"""

RELAXED_BY: dict[str, tuple[str, set[str]]] = {
    "stderr-merged": ("stderr-merged", CAUGHT_BY["stderr-merged"]),
    "leader-only-kill": ("timeout-kills-leader-only", CAUGHT_BY["leader-only-kill"]),
    "stream-after-exit": ("output-at-end", CAUGHT_BY["stream-after-exit"]),
}
"""For each quirk mutant: the quirk its registration would declare, and the checks it relaxes."""


@pytest.mark.parametrize("mutant", sorted(RELAXED_BY))
def test_declared_quirk_relaxes_exactly_its_checks(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
    mutant: str,
) -> None:
    """With the registration's quirk declared, the checks that caught the mutant pass."""
    quirk, checks = RELAXED_BY[mutant]
    suite_pytester.makepyfile(test_quirk=QUIRK_MODULE.format(name=mutant, quirk=quirk))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "-k", " or ".join(checks))
    found = outcomes(result)
    assert {name: found.get(name) for name in checks} == dict.fromkeys(checks, "passed")


def _section(result: pytest.RunResult) -> list[str]:
    """The lines of the ``mango-conformance`` terminal section."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "= mango-conformance =" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[start + 1 : end]


def test_ignored_exit_codes_fail_only_the_exit_code_checks(
    suite_pytester: pytest.Pytester,
    outcomes: Callable[[pytest.RunResult], dict[str, str]],
) -> None:
    """Every exit reported as 0 fails exactly the exit-code checks, each blaming exit codes."""
    suite_pytester.makepyfile(test_mutant=MUTANT_MODULE.format(name="exec-ignores-exit-codes"))
    result = suite_pytester.runpytest("--mango-profile=offline-ci", "--mango-no-shrink")
    failed = {name for name, outcome in outcomes(result).items() if outcome == "failed"}
    assert failed == CAUGHT_BY["exec-ignores-exit-codes"]
    section = _section(result)
    reasons = [line for line in section if line.startswith("failed: ")]
    assert len(reasons) == len(failed)
    assert all("exit code" in line for line in reasons), reasons
    assert section[-1] == (
        "NOT conformant: 4 check(s) failed ("
        + ", ".join(name for name in (line.split(": ")[1] for line in reasons))
        + ")"
    )


def test_a_passing_run_ends_with_conformant(
    suite_pytester: pytest.Pytester,
) -> None:
    """A provider that keeps the contract: the section's last line says conformant, and counts."""
    suite_pytester.makepyfile(
        test_local="""
import pytest
from mango.plugins import load_plugins
from mango_conformance import ProviderSuite


class TestLocal(ProviderSuite):
    @pytest.fixture
    def conformance_target(self):
        return load_plugins(entry_points=False).conformance_targets().get("local")
"""
    )
    result = suite_pytester.runpytest(
        "--mango-profile=offline-ci", "--mango-max-examples=3", "-k", "l02 or state_machine"
    )
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(
        [
            "mango-conformance: lifecycle machine (local): up to 3 examples of up to 40 steps *",
            "mango-conformance: lifecycle machine (local): 1 example(s) run, * provider calls, * s",
            "mango-conformance: lifecycle machine (local): passed after 3 example(s), *",
        ]
    )
    last = _section(result)[-1]
    assert last.startswith("conformant with 0 waiver(s): 7 check(s) passed, 0 skipped, ")
    assert last.endswith(" deselected (not a full run)")
