"""Unit tests of the suite's building blocks: waivers, keys, profiles, ledger, bridge, teardown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import Phase
from hypothesis.database import DirectoryBasedExampleDatabase

import mango_conformance
from mango.domain.registry import ConformanceTarget, TargetCost
from mango.domain.values import Command, SandboxSpec
from mango.local import LocalProvider
from mango_conformance.bridge import AsyncBridge, SlowOperation
from mango_conformance.keys import MAX_KEY_LENGTH, new_session_key, run_id
from mango_conformance.ledger import LeakLedger
from mango_conformance.machine import ALL_PATHS, LifecycleMachine
from mango_conformance.options import SuiteOptions, live_enabled, live_env_var
from mango_conformance.profiles import PROFILES, machine_settings
from mango_conformance.progress import MachineProgress
from mango_conformance.scripts import describe_pid
from mango_conformance.waivers import WaiverError, match_waiver, parse_waivers


def _isort_key(name: str) -> tuple[int, str]:
    if name.isupper():
        return (0, name)
    return (1 if name[0].isupper() else 2, name)


def test_public_names_are_sorted_and_exported() -> None:
    """``__all__`` is sorted (constants, classes, functions) and every name in it exists."""
    names = mango_conformance.__all__
    assert names == sorted(names, key=_isort_key)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(mango_conformance, name) is not None


def test_waivers_parse_with_reasons() -> None:
    """Comments and blank lines are skipped; each waiver keeps its reason and line."""
    waivers = parse_waivers("# header\n\ntest_a  # because\nTestX::test_b # other reason\n")
    assert [(w.pattern, w.reason, w.line) for w in waivers] == [
        ("test_a", "because", 3),
        ("TestX::test_b", "other reason", 4),
    ]
    assert match_waiver("t.py::TestX::test_b", waivers) == waivers[1]
    assert match_waiver("t.py::TestY::test_c", waivers) is None


@pytest.mark.parametrize("line", ["test_a", "test_a #", "test a # spaced"])
def test_malformed_waivers_are_rejected(line: str) -> None:
    """A waiver without a reason, or with a space in its pattern, is an error naming the line."""
    with pytest.raises(WaiverError, match=r"<waivers>:1"):
        parse_waivers(line)


def test_session_keys_are_fresh_short_and_lowercase() -> None:
    """Keys are unique, start with the run id and stay within the portable charset and length."""
    keys = {new_session_key("Some_Tag!") for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert re.fullmatch(r"[a-z0-9-]+", key)
        assert len(key) <= MAX_KEY_LENGTH
        assert key.startswith(f"sc-{run_id()}-sometag")


def test_machine_settings_use_one_database_per_provider_and_profile(tmp_path: Path) -> None:
    """Non-derandomized profiles get <db>/<provider>-<profile>; derandomized ones none."""
    dev = machine_settings(PROFILES["offline-dev"], provider="acme", database_dir=tmp_path)
    assert isinstance(dev.database, DirectoryBasedExampleDatabase)
    assert Path(dev.database.path) == tmp_path / "acme-offline-dev"
    assert dev.deadline is None
    ci = machine_settings(PROFILES["offline-ci"], provider="acme", database_dir=tmp_path)
    assert ci.database is None
    assert ci.derandomize


def test_machine_settings_overrides() -> None:
    """Example and step counts can be overridden and shrinking dropped."""
    chosen = machine_settings(
        PROFILES["live-nightly"],
        provider="acme",
        database_dir=None,
        max_examples=2,
        stateful_steps=3,
        shrink=False,
    )
    assert (chosen.max_examples, chosen.stateful_step_count) == (2, 3)
    assert Phase.shrink not in chosen.phases
    assert not chosen.report_multiple_bugs


@pytest.mark.parametrize(
    ("profile", "process", "container"),
    [
        ("offline-dev", (200, 50), (30, 40)),
        ("offline-ci", (100, 40), (20, 40)),
        ("live-smoke", (3, 10), (3, 10)),
        ("live-nightly", (12, 20), (12, 20)),
    ],
)
def test_the_budget_follows_the_target_cost(
    profile: str, process: tuple[int, int], container: tuple[int, int]
) -> None:
    """A container or service target gets the profile's container budget; flags override it."""
    for cost, expected in (
        (TargetCost.PROCESS, process),
        (TargetCost.CONTAINER, container),
        (TargetCost.SERVICE, container),
    ):
        chosen = machine_settings(PROFILES[profile], provider="x", database_dir=None, cost=cost)
        assert (chosen.max_examples, chosen.stateful_step_count) == expected
    forced = machine_settings(
        PROFILES[profile],
        provider="x",
        database_dir=None,
        cost=TargetCost.CONTAINER,
        max_examples=7,
        stateful_steps=8,
    )
    assert (forced.max_examples, forced.stateful_step_count) == (7, 8)


def test_docker_registers_a_container_target() -> None:
    """mango-conformance run docker sizes its run for containers."""
    from mango_provider_docker.settings import CONFORMANCE_TARGET

    assert CONFORMANCE_TARGET.cost is TargetCost.CONTAINER
    assert mango_conformance.provider_target("x", LocalProvider).cost is TargetCost.PROCESS


@pytest.mark.parametrize("name", ["e2b", "cube", "opensandbox", "daytona"])
def test_remote_providers_register_service_targets(name: str) -> None:
    """mango-conformance run NAME sizes a remote provider's run for a service over HTTP."""
    from mango.plugins import load_plugins

    target = load_plugins(entry_points=True).conformance_targets().get(name)
    assert target is not None
    assert target.cost is TargetCost.SERVICE


def test_provider_target_carries_a_testbed_and_waivers() -> None:
    """provider_target passes the testbed opener and the waivers on to the target."""
    from mango.domain.capabilities import Capability
    from mango_provider_opensandbox.conformance import open_conformance_testbed
    from mango_provider_opensandbox.settings import CONFORMANCE_TARGET

    target = mango_conformance.provider_target(
        "x",
        LocalProvider,
        testbed=open_conformance_testbed,
        waivers={"package-setup": "no package manager"},
    )
    assert target.testbed is open_conformance_testbed
    assert target.waiver(Capability.PACKAGE_SETUP) == "no package manager"
    assert mango_conformance.provider_target("x", LocalProvider).waivers == ()
    assert CONFORMANCE_TARGET.testbed is not None  # opened lazily: the fake imports aiohttp
    assert CONFORMANCE_TARGET.waivers == ()


def test_progress_prints_the_first_example_then_at_most_one_line_per_interval() -> None:
    """Start, the first example, then one line per interval, and the end: never silent for long."""
    lines: list[str] = []
    now = [100.0]
    progress = MachineProgress(
        lines.append, provider="acme", max_examples=30, steps=40, clock=lambda: now[0]
    )
    progress.start()
    for seconds in (0.5, 1.0, 2.0, 6.0, 7.0, 11.5):
        now[0] = 100.0 + seconds
        progress.example_done(calls=10)
    progress.finish("passed")
    prefix = "mango-conformance: lifecycle machine (acme): "
    assert lines == [
        prefix + "up to 30 examples of up to 40 steps (shrinking a failure runs more)",
        prefix + "1 example(s) run, 10 provider calls, 0 s",
        prefix + "4 example(s) run, 40 provider calls, 6 s",
        prefix + "6 example(s) run, 60 provider calls, 12 s",
        prefix + "passed after 6 example(s), 60 provider calls, 12 s",
    ]


def test_live_gate_reads_the_provider_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MANGO_LIVE_<NAME>`` gates live runs; dashes become underscores."""
    assert live_env_var("open-sandbox") == "MANGO_LIVE_OPEN_SANDBOX"
    monkeypatch.setenv("MANGO_LIVE_OPEN_SANDBOX", "yes")
    assert live_enabled("open-sandbox")
    monkeypatch.setenv("MANGO_LIVE_OPEN_SANDBOX", "0")
    assert not live_enabled("open-sandbox")


def test_flood_size_exceeds_a_declared_cap() -> None:
    """The bounded-output check prints at least four times a declared cap."""
    assert SuiteOptions().flood_size == 8 * 1024 * 1024
    assert SuiteOptions(output_cap=16 * 1024 * 1024).flood_size == 64 * 1024 * 1024
    with pytest.raises(ValueError, match="output_cap"):
        SuiteOptions(output_cap=0)


def test_namespace_paths_never_nest() -> None:
    """No generated file path is a directory prefix of another."""
    for path in ALL_PATHS:
        assert not any(other.startswith(path + "/") for other in ALL_PATHS)
        assert not path.startswith("skills/")


def test_bridge_bounds_each_call() -> None:
    """A call slower than the bound fails with SlowOperation; the bridge stays usable."""
    bridge = AsyncBridge(operation_timeout=0.05)
    try:
        with pytest.raises(SlowOperation, match="napping did not finish"):
            bridge.run(asyncio.Event().wait(), "napping")
        assert bridge.run(asyncio.sleep(0, result=7), "quick") == 7
    finally:
        bridge.close()
        bridge.close()


class _BrokenSandbox:
    """A sandbox whose destroy always fails."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def destroy(self) -> None:
        raise RuntimeError("cannot delete")


class _BrokenProvider:
    """A local provider whose sandboxes cannot be destroyed and whose aclose fails."""

    def __init__(self, base: Path) -> None:
        self.inner = LocalProvider(base)

    name = "local"

    @property
    def capabilities(self) -> object:
        return self.inner.capabilities

    async def create(self, key: str, spec: object) -> _BrokenSandbox:
        return _BrokenSandbox(await self.inner.create(key, spec))  # type: ignore[arg-type]

    async def attach(self, key: str, ref: object, spec: object) -> _BrokenSandbox:
        return _BrokenSandbox(await self.inner.attach(key, ref, spec))  # type: ignore[arg-type]

    async def aclose(self) -> None:
        raise RuntimeError("cannot close")


@contextlib.asynccontextmanager
async def _open_broken(scratch: Path) -> AsyncIterator[_BrokenProvider]:
    provider = _BrokenProvider(scratch / "sandboxes")
    try:
        yield provider
    finally:
        await provider.aclose()


def test_machine_teardown_never_raises_and_records_leaks(tmp_path: Path) -> None:
    """Teardown of a run whose sandboxes cannot be destroyed records leaks instead of raising."""
    ledger = LeakLedger()
    target = ConformanceTarget(provider="local", open=_open_broken)  # type: ignore[arg-type]
    machine_class = LifecycleMachine.bind(target, scratch_dir=tmp_path, ledger=ledger)
    machine = machine_class()
    try:
        machine.first_client_and_session()
    finally:
        machine.teardown()
    details = [leak.detail for leak in ledger.entries]
    assert any("cannot delete" in detail for detail in details)
    assert any("cannot close" in detail for detail in details)
    assert all(leak.provider == "local" for leak in ledger.entries)


def test_unbound_machine_explains_itself() -> None:
    """The base machine has no target and says how to give it one."""
    with pytest.raises(TypeError, match="bind"):
        LifecycleMachine()


def test_options_take_quirks_from_the_registration() -> None:
    """for_registration carries the registration's capabilities and quirks."""
    from mango.provider import CapabilitySet, ProviderRegistration, Quirk, SupportLevel

    registration = ProviderRegistration(
        name="acme",
        capabilities=CapabilitySet(),
        support_level=SupportLevel.PREVIEW,
        settings=(),
        factory=lambda _context: None,  # type: ignore[arg-type,return-value]
        quirks=[Quirk.STDERR_MERGED],
    )
    options = SuiteOptions.for_registration(registration, output_cap=1024)
    assert options.declared_quirks == {Quirk.STDERR_MERGED}
    assert options.has_quirk(Quirk.STDERR_MERGED)
    assert not options.has_quirk(Quirk.TIMEOUT_KILLS_LEADER_ONLY)
    assert options.declared_capabilities == CapabilitySet()
    assert options.output_cap == 1024
    assert SuiteOptions(declared_quirks=["output-at-end"]).declared_quirks == {Quirk.OUTPUT_AT_END}


async def test_a_survivors_description_says_what_proc_says(tmp_path: Path) -> None:
    """The message of a check whose process outlived its bound names its state and command."""
    provider = LocalProvider(tmp_path / "sandboxes")
    sandbox = await provider.create("survivor", SandboxSpec())
    try:
        started = await sandbox.exec(
            Command(("sh", "-c", 'sleep 300 >/dev/null 2>&1 & printf %s "$!" > p.child'))
        )
        assert started.exit_code == 0
        detail = await describe_pid(sandbox, "sh", "p.child")
        pid = int((await sandbox.read_file("p.child")).decode())
        assert detail.startswith(f"pid {pid} Name: sleep State: S"), detail
        for field in ("PPid:", "SigPnd:", "cmdline:sleep 300"):
            assert field in detail, detail
        os.kill(pid, signal.SIGKILL)
        # Gone (reaped by init or not): at most the pid and what a zombie's /proc still says.
        for _ in range(200):  # a liveness bound, not a timing
            detail = await describe_pid(sandbox, "sh", "p.child")
            if "State: S" not in detail:
                break
            await asyncio.sleep(0.01)
        assert "State: S" not in detail, detail
        assert detail.startswith(f"pid {pid}"), detail
        assert await describe_pid(sandbox, "sh", "no-such-file") == "(no detail)"
    finally:
        await sandbox.destroy()
        await provider.aclose()
