"""Intents hashed by spec-hash version 1 still finish on the real PostgreSQL store."""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.app import SessionManager
from mango.domain import ProvisioningIntent, SandboxSpec, spec_hash
from mango.local import LocalProvider
from mango.postgres import PostgresBindingStore

pytestmark = pytest.mark.postgres

SPEC = SandboxSpec(timeout=30)
V1_HASH = "sha256:2ca30ec2461f0d5fffededaf72826cfbcf9b79281ebf78596bcbf3feeb9e634b"
"""``spec_hash(SPEC)`` as the code of commit ccb5047 (version 1) computed it."""


async def _store_v1_intent(store: PostgresBindingStore, session_id: str) -> None:
    await store.ensure_session(session_id)
    stored = await store.put_intent(
        ProvisioningIntent(session_id=session_id, provider="local", spec=SPEC, spec_hash=V1_HASH)
    )
    assert stored.spec_hash == V1_HASH != spec_hash(SPEC)


async def test_reconciler_finishes_a_v1_intent(store: PostgresBindingStore, tmp_path: Path) -> None:
    """A v1-hashed intent left by an older worker is reconciled into a usable binding."""
    await _store_v1_intent(store, "old-intent")
    manager = SessionManager(LocalProvider(tmp_path / "sandboxes"), store)
    report = await manager.reconcile_provisioning()
    assert (report.attempted, report.completed, report.failures) == (1, 1, ())
    assert await store.get_intent("old-intent") is None
    binding = await store.get_binding("old-intent")
    assert binding is not None
    sandbox = await manager.acquire("old-intent", SPEC)
    assert sandbox.ref == binding.ref


async def test_acquire_adopts_a_pending_v1_intent(
    store: PostgresBindingStore, tmp_path: Path
) -> None:
    """Acquiring with the same spec continues the v1 intent instead of calling it another spec."""
    await _store_v1_intent(store, "pending")
    manager = SessionManager(LocalProvider(tmp_path / "sandboxes"), store)
    sandbox = await manager.acquire("pending", SPEC)
    binding = await store.get_binding("pending")
    assert binding is not None
    assert binding.ref == sandbox.ref
    assert await store.get_intent("pending") is None
