"""Deployment namespaces on real PostgreSQL, and two deployments sharing one backend.

Two deployments are two databases on the embedded server: each store
generates its own namespace, and the providers opened with it (through the
registry, as the runtime does) never see, attach to or remove each other's
sandboxes, even for the same Session id. Local runs always; Docker needs the
daemon and the ``mango-test-busybox:latest`` image (skipped without them
unless ``MANGO_REQUIRE_DOCKER=1``).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.app import SessionManager
from mango.config import Settings
from mango.domain import ConfigurationError, OwnershipError
from mango.domain.hashing import spec_hash
from mango.domain.ports import Provider
from mango.domain.values import Command, ProvisioningIntent, SandboxSpec
from mango.plugins import load_plugins
from mango.postgres import PostgresBindingStore, open_store
from mango.runtime import deployment_context

pytestmark = pytest.mark.postgres

SPEC = SandboxSpec(timeout=60.0)
DOCKER_IMAGE = "mango-test-busybox:latest"


async def test_namespace_is_generated_once_and_persisted(database_url: str) -> None:
    """Concurrent first use agrees on one namespace; reopening the store gives it again."""
    stores = [await open_store(database_url, min_size=1, max_size=1) for _ in range(4)]
    try:
        seen = await asyncio.gather(*(store.deployment_namespace() for store in stores))
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))
    assert len(set(seen)) == 1
    namespace = seen[0]
    assert len(namespace) == 12
    assert namespace == namespace.lower()
    async with await open_store(database_url) as reopened:
        assert await reopened.deployment_namespace() == namespace


async def test_setting_overrides_the_stored_namespace(store: PostgresBindingStore) -> None:
    """MANGO_NAMESPACE wins over the stored one; without it the store's is used."""
    stored = await store.deployment_namespace()
    env = {"MANGO_STATE_DIR": "/tmp/mango-unused"}
    assert (await deployment_context(Settings.from_env(env), store)).namespace == stored
    override = Settings.from_env({**env, "MANGO_NAMESPACE": "blue-team"})
    assert (await deployment_context(override, store)).namespace == "blue-team"
    assert await store.deployment_namespace() == stored


@pytest.mark.parametrize("value", ["Blue", "-x", "x-", "a" * 33, "a_b"])
def test_bad_namespace_setting_is_a_configuration_error(value: str) -> None:
    """An invalid MANGO_NAMESPACE fails at startup, naming the variable."""
    with pytest.raises(ConfigurationError, match="MANGO_NAMESPACE"):
        Settings.from_env({"MANGO_STATE_DIR": "/tmp/mango-unused", "MANGO_NAMESPACE": value})


async def _deployment(
    url: str, name: str, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[PostgresBindingStore, Provider]:
    monkeypatch.delenv("MANGO_NAMESPACE", raising=False)
    store = await open_store(url)
    # The provider reads its settings from the same mapping (ProviderContext.environ).
    settings = Settings.from_env(
        {
            "MANGO_STATE_DIR": str(shared),
            "MANGO_SANDBOX": name,
            "MANGO_LOCAL_SANDBOX_DIR": str(shared / "local"),
            "MANGO_SANDBOX_RESOURCE_DIR": str(shared / "docker"),
            "MANGO_SANDBOX_IMAGE": DOCKER_IMAGE,
            "MANGO_SANDBOX_PULL": "0",
            **({"DOCKER_HOST": os.environ["DOCKER_HOST"]} if "DOCKER_HOST" in os.environ else {}),
        }
    )
    registry = load_plugins().providers()
    return store, registry.open(name, await deployment_context(settings, store))


async def test_two_deployments_share_a_backend_without_touching_each_other(
    provider_name: str,
    database_url: str,
    second_database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same Session id in two deployments: two sandboxes; neither sees nor deletes the other's."""
    store_a, one = await _deployment(database_url, provider_name, tmp_path, monkeypatch)
    store_b, two = await _deployment(second_database_url, provider_name, tmp_path, monkeypatch)
    session = f"shared-{uuid.uuid4().hex[:8]}"
    try:
        assert await store_a.deployment_namespace() != await store_b.deployment_namespace()
        first = await one.create(session, SPEC)
        second = await two.create(session, SPEC)
        assert first.ref != second.ref
        await first.write_file("who", b"a")
        await second.write_file("who", b"b")

        assert await one.find(session) == first.ref
        assert await two.find(session) == second.ref
        assert [owned.ref for owned in await one.list_owned()] == [first.ref]
        assert [owned.ref for owned in await two.list_owned()] == [second.ref]

        with pytest.raises(OwnershipError):
            await one.attach(session, second.ref, SPEC)
        with pytest.raises(OwnershipError):
            await one.destroy(session, second.ref)
        with pytest.raises(OwnershipError):
            await two.attach(session, first.ref, SPEC)

        await one.destroy(session, first.ref)
        assert await one.find(session) is None
        assert await one.list_owned() == []
        survivor = await two.attach(session, second.ref, SPEC)
        assert await survivor.read_file("who") == b"b"
        result = await survivor.exec(Command(argv=("cat", "who")))
        assert result.stdout == b"b"
        assert "writable" in await one.health() or "Docker Engine" in await one.health()
    finally:
        for provider in (one, two):
            for owned in await provider.list_owned():
                await provider.destroy(session, owned.ref)
            await provider.aclose()
        await store_a.aclose()
        await store_b.aclose()


@attrs.define
class CountingProvider:
    """A real provider, with its create/attach calls counted (nothing else changes)."""

    inner: Provider
    creates: int = 0
    attaches: int = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Any:
        return self.inner.capabilities

    async def create(self, session_key: str, spec: SandboxSpec) -> Any:
        self.creates += 1
        return await self.inner.create(session_key, spec)

    async def attach(self, session_key: str, ref: Any, spec: SandboxSpec) -> Any:
        self.attaches += 1
        return await self.inner.attach(session_key, ref, spec)


async def test_intent_only_release_creates_nothing(
    provider_name: str, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tearing down Sessions that never got a binding finds and destroys; no create, no attach.

    One Session crashed before create (intent only, nothing at the provider),
    one after create (intent and a real sandbox); both are deleted on the real
    store and the real provider, and the counted provider sees no create call.
    """
    store, provider = await _deployment(database_url, provider_name, tmp_path, monkeypatch)
    counted = CountingProvider(provider)
    manager = SessionManager(counted, store)  # type: ignore[arg-type]
    empty, made = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("empty", "made"))
    try:
        for session in (empty, made):
            await store.ensure_session(session)
            await store.put_intent(
                ProvisioningIntent(session, provider_name, SPEC, spec_hash(SPEC))
            )
        orphan = await provider.create(made, SPEC)  # the crash came after create
        assert await provider.find(made) == orphan.ref

        assert await manager.delete_session(empty) is True
        assert await manager.delete_session(made) is True

        assert (counted.creates, counted.attaches) == (0, 0)
        assert await provider.find(made) is None
        assert await provider.list_owned() == []
        assert await store.list_sessions() == []
    finally:
        await provider.aclose()
        await store.aclose()
