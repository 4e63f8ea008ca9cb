"""pytest11 entry point: options, markers and Hypothesis profiles; inert until the suite is used.

Nothing here runs a check. The suite's tests exist only where a test module
subclasses :class:`mango_conformance.ProviderSuite`; until then the plugin
adds its options and markers, registers (never loads) its Hypothesis
profiles, and prints nothing.

Options:

``--mango-profile NAME``
    ``offline-dev`` (default), ``offline-ci``, ``live-smoke`` or ``live-nightly``;
    also ``MANGO_CONFORMANCE_PROFILE``.
``--mango-strict``
    Fail the run if a sandbox leaked or a waiver is stale.
``--mango-waivers FILE``
    Skip known failures by node-id substring, each with a reason.
``--mango-max-examples N`` / ``--mango-steps N``
    Override the profile's Hypothesis example and step counts.
``--mango-no-shrink``
    Report the first failing example as found (fast feedback, e.g. for mutants).
``--mango-hypothesis-db DIR``
    Where the per-provider example databases live
    (default ``<rootdir>/.hypothesis/conformance``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from pathlib import Path

import pytest

from mango_conformance.checks.capabilities import NOT_DECLARED, PENDING
from mango_conformance.config import RUN_CONFIG_KEY, RunConfig, run_config
from mango_conformance.ledger import LeakLedger, set_current_ledger
from mango_conformance.profiles import PROFILE_ENV, PROFILES, profile_from_env
from mango_conformance.profiles import register_hypothesis_profiles as _register_profiles
from mango_conformance.waivers import Waiver, WaiverError, match_waiver, read_waivers

__all__ = [
    "MARKERS",
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_deselected",
    "pytest_runtest_makereport",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
    "verdict",
]

MARKERS = (
    "mango_conformance: a check of the mango provider conformance suite",
    "mango_parity: a check ported from the reference core suite (L-01 to L-05)",
    "mango_gap: a contract clause the reference suite did not check",
    "mango_stream: streaming exec matches the buffered exec",
    "mango_stateful: the Hypothesis lifecycle state machine",
    (
        "mango_capability(name, testbed=False): runs only if the provider declares the "
        "capability; testbed=True: a behavioural check needing the target's testbed or waiver"
    ),
    "mango_capability_group: a check of the capability groups",
    "mango_destructive: may leave the sandbox unusable (it gets its own sandbox)",
)
"""The markers the plugin registers."""

_PREVIOUS_LEDGER = pytest.StashKey[LeakLedger]()
_STALE = pytest.StashKey[tuple[Waiver, ...]]()


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the suite options."""
    group = parser.getgroup("mango-conformance", "mango provider conformance suite")
    group.addoption(
        "--mango-profile",
        choices=sorted(PROFILES),
        default=None,
        help=f"cost profile of the suite (default: ${PROFILE_ENV} or offline-dev)",
    )
    group.addoption(
        "--mango-strict",
        action="store_true",
        default=False,
        help="fail the run on leaked sandboxes and stale waivers",
    )
    group.addoption(
        "--mango-waivers",
        metavar="FILE",
        default=None,
        help="file of '<node-id substring> # <reason>' lines: known failures to skip",
    )
    group.addoption(
        "--mango-max-examples",
        type=_positive_int,
        default=None,
        metavar="N",
        help="override the profile's number of state-machine examples",
    )
    group.addoption(
        "--mango-steps",
        type=_positive_int,
        default=None,
        metavar="N",
        help="override the profile's number of steps per state-machine example",
    )
    group.addoption(
        "--mango-no-shrink",
        action="store_true",
        default=False,
        help="report the first failing state-machine example without shrinking it",
    )
    group.addoption(
        "--mango-hypothesis-db",
        metavar="DIR",
        default=None,
        help="directory of the per-provider example databases "
        "(default: <rootdir>/.hypothesis/conformance)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register markers and profiles and read the options; runs no check."""
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    _register_profiles()
    name = config.getoption("--mango-profile") or profile_from_env()
    if name not in PROFILES:
        raise pytest.UsageError(
            f"{PROFILE_ENV}={name!r} is not a mango-conformance profile "
            f"(choose from {', '.join(sorted(PROFILES))})"
        )
    waivers: tuple[Waiver, ...] = ()
    waiver_file = config.getoption("--mango-waivers")
    if waiver_file:
        try:
            waivers = read_waivers(Path(waiver_file))
        except WaiverError as exc:
            raise pytest.UsageError(str(exc)) from None
    database = config.getoption("--mango-hypothesis-db")
    run = RunConfig(
        profile=PROFILES[name],
        strict=bool(config.getoption("--mango-strict")),
        waivers=waivers,
        database_dir=Path(database)
        if database
        else config.rootpath / ".hypothesis" / "conformance",
        max_examples=config.getoption("--mango-max-examples"),
        stateful_steps=config.getoption("--mango-steps"),
        shrink=not config.getoption("--mango-no-shrink"),
    )
    config.stash[RUN_CONFIG_KEY] = run
    config.stash[_PREVIOUS_LEDGER] = set_current_ledger(run.ledger)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore the ledger that was current before this session (nested pytester runs)."""
    previous = config.stash.get(_PREVIOUS_LEDGER, None)
    if previous is not None:
        set_current_ledger(previous)


def _in_suite(item: pytest.Item) -> bool:
    return item.get_closest_marker("mango_conformance") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply waivers to the suite's tests, before any deselection; find stale waivers."""
    run = run_config(config)
    suite = [item for item in items if _in_suite(item)]
    if not suite or not run.waivers:
        return
    used: set[Waiver] = set()
    for item in suite:
        waiver = match_waiver(item.nodeid, run.waivers)
        if waiver is None:
            continue
        used.add(waiver)
        run.waived[item.nodeid] = waiver.reason
        item.add_marker(pytest.mark.skip(reason=f"waived: {waiver.reason}"))
    config.stash[_STALE] = tuple(waiver for waiver in run.waivers if waiver not in used)


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    """Count the suite's deselected checks: a verdict over a subset says so."""
    suite = [item for item in items if _in_suite(item)]
    if suite:
        run_config(suite[0].config).deselected += len(suite)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Record each check's outcome, and why it failed, for the verdict."""
    report = yield
    if _in_suite(item):
        _record(run_config(item.config), report)
    return report


def _record(run: RunConfig, report: pytest.TestReport) -> None:
    nodeid = report.nodeid
    if run.outcomes.get(nodeid) == "failed":
        return  # a teardown after a failed call changes nothing
    if report.failed:
        run.outcomes[nodeid] = "failed"
        run.failures[nodeid] = _reason(report)
    elif report.skipped:
        run.outcomes[nodeid] = "skipped"
        run.skip_kinds[nodeid] = "waived" if nodeid in run.waived else _skip_kind(report)
    elif report.when == "call":
        run.outcomes[nodeid] = "passed"


_REASON_CHARS = 160
_SKIP_KINDS = (NOT_DECLARED, PENDING)


def _skip_kind(report: pytest.TestReport) -> str:
    """``not declared``, ``pending`` or ``other``: how the verdict labels a skip."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = text.removeprefix("Skipped: ")
    return next((kind for kind in _SKIP_KINDS if reason.startswith(f"{kind}: ")), "other")


def _reason(report: pytest.TestReport) -> str:
    """The first line of a failure: the check's own assertion message where it has one."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    line = next((part.strip() for part in text.splitlines() if part.strip()), "failed")
    line = line.removeprefix("AssertionError: ")
    if report.when != "call":
        line = f"in {report.when}: {line}"
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 3] + "..."


def _check_name(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Count the selected tests of the suite; zero keeps the plugin silent."""
    run_config(session.config).suite_items = sum(1 for item in session.items if _in_suite(item))


def _problems(config: pytest.Config) -> tuple[int, int]:
    run = run_config(config)
    stale = config.stash.get(_STALE, ())
    return len(run.ledger), len(stale)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In strict mode, turn leaks and stale waivers into a failed run."""
    run = run_config(session.config)
    if not run.strict or not run.suite_items:
        return
    leaks, stale = _problems(session.config)
    if (leaks or stale) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def verdict(run: RunConfig, *, leaks: int, stale: int) -> str:
    """The suite's last line: ``conformant ...`` or ``NOT conformant: <why>``."""
    reasons = []
    failed = [_check_name(nodeid) for nodeid in run.failures]
    if failed:
        reasons.append(f"{len(failed)} check(s) failed ({', '.join(failed)})")
    if run.strict and leaks:
        reasons.append(f"{leaks} sandbox(es) leaked under --mango-strict")
    if run.strict and stale:
        reasons.append(f"{stale} stale waiver(s) under --mango-strict")
    outcomes = list(run.outcomes.values())
    counts = {outcome: outcomes.count(outcome) for outcome in ("passed", "skipped")}
    if not reasons and not counts["passed"]:
        reasons.append(f"no check passed ({counts['skipped']} skipped, none failed)")
    if reasons:
        return "NOT conformant: " + "; ".join(reasons)
    text = f"conformant with {len(run.waived)} waiver(s)"
    if leaks:
        text += f" and {leaks} leak(s)"
    text += f": {counts['passed']} check(s) passed, {counts['skipped']} skipped"
    kinds = list(run.skip_kinds.values())
    labels = [
        f"{kinds.count(kind)} {kind}"
        for kind in ("waived", NOT_DECLARED, PENDING, "other")
        if kinds.count(kind)
    ]
    if labels:
        text += f" ({', '.join(labels)})"
    if run.deselected:
        text += f", {run.deselected} deselected (not a full run)"
    return text


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Report the profile, waivers, failures, stale waivers and leaks, then one verdict line."""
    run = run_config(config)
    if not run.providers and not len(run.ledger):
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "mango-conformance")
    providers = ", ".join(sorted(run.providers)) or "none"
    write(f"profile {run.profile.name}; provider(s): {providers}")
    for nodeid, reason in sorted(run.waived.items()):
        write(f"waived: {nodeid}: {reason}")
    for waiver in config.stash.get(_STALE, ()):
        write(f"WARNING: stale waiver {waiver.pattern!r} (line {waiver.line}) matches no test")
    for leak in run.ledger.entries:
        write(f"LEAK: {leak.describe()}", red=True)
    for nodeid, reason in run.failures.items():
        write(f"failed: {_check_name(nodeid)}: {reason}", red=True)
    leaks, stale = _problems(config)
    if run.strict and (leaks or stale):
        write(
            f"--mango-strict: failing the run ({leaks} leak(s), {stale} stale waiver(s))", red=True
        )
    if not run.suite_items:
        return
    line = verdict(run, leaks=leaks, stale=stale)
    conformant = line.startswith("conformant")
    warn = bool(leaks or run.waived or run.deselected)
    write(line, green=conformant and not warn, yellow=conformant and warn, red=not conformant)
