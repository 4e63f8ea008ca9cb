"""The orphan sweep (mango.app.sweep) on the local provider and the in-memory store."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.app import InMemoryBindingStore, SessionManager
from mango.app.sweep import Outcome, Verdict, sweep_orphans
from mango.domain import Command, InvalidInput, OwnershipError, SandboxSpec
from mango.domain.durations import format_duration, parse_duration
from mango.domain.values import OwnedResource
from mango.local import LocalProvider
from mango.local.layout import owner_record_path

SPEC = SandboxSpec()
HOUR = 3600.0


def _age(ref_path: str, seconds: float) -> None:
    """Make a local sandbox look ``seconds`` old (its owner record's time is its birth)."""
    then = time.time() - seconds
    os.utime(owner_record_path(Path(ref_path)), (then, then), follow_symlinks=False)


@attrs.define
class _Pausing:
    """A provider whose create returns only when told to: a provisioning caught mid-way."""

    inner: LocalProvider
    created: asyncio.Event = attrs.field(factory=asyncio.Event)
    proceed: asyncio.Event = attrs.field(factory=asyncio.Event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def create(self, session_key: str, spec: SandboxSpec) -> Any:
        sandbox = await self.inner.create(session_key, spec)
        self.created.set()
        await self.proceed.wait()
        return sandbox


async def test_sweep_reports_then_destroys_only_unclaimed_old_resources(tmp_path: Path) -> None:
    """A bound Session's sandbox and another namespace's are never touched; an old orphan goes."""
    store = InMemoryBindingStore(namespace="ours")
    provider = LocalProvider(tmp_path, namespace="ours")
    foreign = LocalProvider(tmp_path, namespace="theirs")
    manager = SessionManager(provider, store)
    await manager.ensure_session("bound")
    bound = await manager.acquire("bound", SPEC)
    orphan = await provider.create(f"hand-made-{uuid.uuid4().hex}", SPEC)
    young = await provider.create("hand-made-young", SPEC)
    theirs = await foreign.create("hand-made-old", SPEC)
    _age(orphan.ref.external_id, 2 * HOUR)
    _age(bound.ref.external_id, 2 * HOUR)
    _age(theirs.ref.external_id, 2 * HOUR)

    report = await sweep_orphans(provider, store, older_than=HOUR)
    assert (report.listed, report.claimed, report.destroy, report.ok) == (3, 1, False, True)
    verdicts = {item.ref: item.verdict for item in report.items}
    assert verdicts == {orphan.ref: Verdict.ORPHAN, young.ref: Verdict.TOO_YOUNG}
    assert all(item.outcome is None for item in report.items)
    assert len(await provider.list_owned()) == 3  # reporting removes nothing

    swept = await sweep_orphans(provider, store, older_than=HOUR, destroy=True)
    assert [(i.ref, i.outcome) for i in swept.orphans] == [(orphan.ref, Outcome.DESTROYED)]
    assert swept.destroyed == 1
    left = {r.ref for r in await provider.list_owned()}
    assert left == {bound.ref, young.ref}
    assert not await asyncio.to_thread(Path(orphan.ref.external_id).exists)
    assert (await bound.exec(Command(argv=("echo", "alive")))).stdout == b"alive\n"
    assert [r.ref for r in await foreign.list_owned()] == [theirs.ref]


async def test_sweep_during_provisioning_never_takes_the_new_sandbox(tmp_path: Path) -> None:
    """gc with no age margin at all, while create has returned and the binding is not written."""
    store = InMemoryBindingStore()
    inner = LocalProvider(tmp_path, namespace=store.namespace)
    pausing = _Pausing(inner)
    manager = SessionManager(pausing, store)  # type: ignore[arg-type]
    await manager.ensure_session("racing")
    acquiring = asyncio.create_task(manager.acquire("racing", SPEC))
    await asyncio.wait_for(pausing.created.wait(), 10)
    assert await store.get_binding("racing") is None  # mid-way: created, not yet bound
    [listed] = await inner.list_owned()

    report = await sweep_orphans(inner, store, older_than=0, destroy=True)
    assert (report.listed, report.claimed, report.items) == (1, 1, ())
    pausing.proceed.set()
    sandbox = await asyncio.wait_for(acquiring, 10)
    assert sandbox.ref == listed.ref
    assert (await sandbox.exec(Command(argv=("echo", "kept")))).stdout == b"kept\n"


async def test_a_session_row_without_binding_claims_its_resource(tmp_path: Path) -> None:
    """A database restored from before the binding: the Session adopts its sandbox, gc keeps it."""
    store = InMemoryBindingStore()
    provider = LocalProvider(tmp_path, namespace=store.namespace)
    manager = SessionManager(provider, store)
    await manager.ensure_session("restored")
    sandbox = await manager.acquire("restored", SPEC)
    store.bindings.clear()  # what the restored backup does not have
    report = await sweep_orphans(provider, store, older_than=0, destroy=True)
    assert (report.claimed, report.items) == (1, ())
    again = await SessionManager(provider, store).acquire("restored", SPEC)
    assert again.ref == sandbox.ref


async def test_a_record_claiming_the_orphan_meanwhile_keeps_it(tmp_path: Path) -> None:
    """The store is asked again right before each removal."""

    @attrs.define
    class _Late:
        store: InMemoryBindingStore
        calls: int = 0

        async def claimed(self, provider: str, resources: Any) -> frozenset[Any]:
            self.calls += 1
            if self.calls == 2:  # between the listing's answer and the removal
                await self.store.ensure_session("late")
            return await self.store.claimed(provider, resources)

    store = InMemoryBindingStore()
    provider = LocalProvider(tmp_path, namespace=store.namespace)
    made = await provider.create("late", SPEC)
    report = await sweep_orphans(provider, _Late(store), older_than=0, destroy=True)
    [item] = report.items
    assert (item.verdict, item.outcome, item.detail) == (
        Verdict.CLAIMED,
        Outcome.KEPT,
        "claimed since listed",
    )
    assert [r.ref for r in await provider.list_owned()] == [made.ref]


async def test_destroy_owned_refuses_what_it_cannot_confirm(tmp_path: Path) -> None:
    """Another Session's hash, another base directory or a path outside: OwnershipError, kept."""
    provider = LocalProvider(tmp_path / "a", namespace="ours")
    made = await provider.create("mine", SPEC)
    [listed] = await provider.list_owned()
    wrong = attrs.evolve(listed, session_hash="0" * 32)
    with pytest.raises(OwnershipError, match="another session"):
        await provider.destroy_owned(wrong)
    elsewhere = LocalProvider(tmp_path / "b", namespace="ours")
    with pytest.raises(OwnershipError, match="not a session directory"):
        await elsewhere.destroy_owned(listed)
    outside = OwnedResource(attrs.evolve(listed.ref, external_id=str(tmp_path)), "0" * 32)
    with pytest.raises(OwnershipError):
        await provider.destroy_owned(outside)
    other_namespace = LocalProvider(tmp_path / "a", namespace="theirs")
    with pytest.raises(OwnershipError, match="another deployment"):
        await other_namespace.destroy_owned(listed)
    assert await asyncio.to_thread(Path(made.ref.external_id).is_dir)
    await provider.destroy_owned(listed)
    await provider.destroy_owned(listed)  # idempotent
    assert await provider.list_owned() == []


async def test_a_provider_that_cannot_sweep_reports_and_removes_nothing(tmp_path: Path) -> None:
    """Without destroy_owned the orphan is a failure with a hint, never a guess."""

    @attrs.define
    class _Plain:
        inner: LocalProvider

        @property
        def name(self) -> str:
            return self.inner.name

        async def list_owned(self) -> Any:
            return await self.inner.list_owned()

    provider = LocalProvider(tmp_path)
    await provider.create("hand-made", SPEC)
    plain: Any = _Plain(provider)
    report = await sweep_orphans(plain, InMemoryBindingStore(), older_than=0, destroy=True)
    [item] = report.items
    assert item.outcome is Outcome.FAILED
    assert "remove it by hand" in item.detail
    assert not report.ok
    assert len(await provider.list_owned()) == 1


def test_older_than_must_be_a_duration() -> None:
    """A negative or non-numeric age is refused before anything is listed."""
    with pytest.raises(InvalidInput):
        asyncio.run(sweep_orphans(None, None, older_than=-1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("1.5h", 5400.0), ("7d", 604800.0), ("0", 0.0)],
)
def test_durations(text: str, seconds: float) -> None:
    """The one duration grammar: bare seconds or s/m/h/d."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-1", "1w", "h", "1 h 2", "nan"])
def test_bad_durations(text: str) -> None:
    """Anything else is InvalidInput naming what was wrong."""
    with pytest.raises(InvalidInput, match="--older-than"):
        parse_duration(text, what="--older-than")


def test_format_duration() -> None:
    """Short readings, rounded down."""
    assert [format_duration(s) for s in (5, 125, 7300, 200000)] == ["5s", "2m", "2h", "2d"]
