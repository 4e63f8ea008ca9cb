"""The PostgreSQL BindingStore against a real server: migrations, semantics, races."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from urllib.parse import urlsplit

import attrs
import psycopg
import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from mango.domain import (
    Binding,
    BindingStore,
    ConfigurationError,
    InvalidInput,
    PackagePlan,
    PreconditionFailed,
    ProviderUnavailable,
    ProvisioningBlocked,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    spec_hash,
)
from mango.domain.hashing import canonical_form
from mango.postgres import (
    Migration,
    Pool,
    PostgresBindingStore,
    apply_migrations,
    load_migrations,
    open_store,
    redact_conninfo,
)

pytestmark = pytest.mark.postgres


def make_intent(
    session_id: str, provider: str = "local", timeout: float = 10
) -> ProvisioningIntent:
    spec = SandboxSpec(timeout=timeout, network_allowed_hosts=["example.com"])
    return ProvisioningIntent(session_id, provider, spec, spec_hash(spec))


def make_binding(session_id: str, external_id: str, provider: str = "local") -> Binding:
    return Binding(session_id, SandboxRef(provider, external_id), f"hash-{external_id}")


async def fetch_all(url: str, query: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(query.encode())
        return await cursor.fetchall()


def migration_pool(url: str) -> Pool:
    return AsyncConnectionPool(url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False)


# ------------------------------------------------------------------ migrations


async def test_migrations_apply_once_with_eight_concurrent_openers(database_url: str) -> None:
    """Eight stores opened at once leave exactly one history row per shipped migration."""
    stores = await asyncio.gather(*(open_store(database_url, max_size=2) for _ in range(8)))
    try:
        rows = await fetch_all(
            database_url, "SELECT version, name, checksum FROM mango_schema_migrations"
        )
        expected = [(m.version, m.name, m.checksum) for m in load_migrations()]
        assert expected == sorted(rows)
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))


async def test_runner_applies_each_pending_migration_exactly_once(database_url: str) -> None:
    """Concurrent runners under the advisory lock: one applies, the others find nothing."""
    pools = [migration_pool(database_url) for _ in range(8)]
    for pool in pools:
        await pool.open(wait=True)
    try:
        extra = Migration(9001, "extra", "CREATE TABLE extra_table (x integer)")
        results = await asyncio.gather(
            *(apply_migrations(pool, [*load_migrations(), extra]) for pool in pools)
        )
        applied = [migration for result in results for migration in result]
        assert [*load_migrations(), extra] == applied
        assert await apply_migrations(pools[0], [*load_migrations(), extra]) == []
    finally:
        await asyncio.gather(*(pool.close() for pool in pools))


async def test_changed_migration_is_a_configuration_error(database_url: str) -> None:
    """A recorded migration whose SQL changed is refused, by the runner and by open_store."""
    async with await open_store(database_url):
        pass
    edited = [attrs.evolve(m, sql=m.sql + "\n-- edited\n") for m in load_migrations()]
    async with migration_pool(database_url) as pool:
        with pytest.raises(ConfigurationError, match="checksum"):
            await apply_migrations(pool, edited)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("UPDATE mango_schema_migrations SET checksum = 'sha256:0'")
    with pytest.raises(ConfigurationError, match="0001_initial"):
        await open_store(database_url)


async def test_failed_migration_rolls_back_and_releases_the_lock(database_url: str) -> None:
    """A failing migration leaves neither its tables nor a history row, and no lock behind."""
    broken = Migration(9002, "broken", "CREATE TABLE half_done (x integer); SELECT 1 / 0;")
    async with migration_pool(database_url) as pool:
        with pytest.raises(psycopg.errors.DivisionByZero):
            await apply_migrations(pool, [*load_migrations(), broken])
    async with migration_pool(database_url) as other:
        assert await apply_migrations(other, load_migrations()) == []
    assert await fetch_all(database_url, "SELECT to_regclass('half_done')::text") == [(None,)]
    versions = await fetch_all(database_url, "SELECT version FROM mango_schema_migrations")
    assert [(m.version,) for m in load_migrations()] == versions


# -------------------------------------------------------------------- sessions


def test_store_implements_the_port(store: PostgresBindingStore) -> None:
    """The store satisfies the BindingStore protocol (checked by mypy)."""
    port: BindingStore = store
    assert port is store


async def test_ensure_session_returns_the_stored_row(store: PostgresBindingStore) -> None:
    """ensure_session is insert-if-absent and returns the same UTC row every time."""
    first = await store.ensure_session("s-1")
    second = await store.ensure_session("s-1")
    assert first == second
    assert first == await store.get_session("s-1")
    assert first.created_at.utcoffset() is not None
    assert first.created_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert first.deleting_at is None


async def test_get_session_of_an_absent_session_is_none(store: PostgresBindingStore) -> None:
    """Reading an unknown Session gives None."""
    assert await store.get_session("nobody") is None


async def test_invalid_session_id_is_invalid_input(store: PostgresBindingStore) -> None:
    """A malformed Session id never reaches SQL."""
    with pytest.raises(InvalidInput):
        await store.ensure_session(" padded ")


async def test_list_sessions_oldest_first_with_limit(store: PostgresBindingStore) -> None:
    """Sessions are listed by creation time, then id; limit bounds the list."""
    created = [await store.ensure_session(name) for name in ("c", "a", "b")]
    assert created == list(await store.list_sessions())
    assert created[:2] == list(await store.list_sessions(limit=2))
    assert list(await store.list_sessions(limit=0)) == []


async def test_fence_session_is_idempotent(store: PostgresBindingStore) -> None:
    """The first fence time is kept; an absent Session gives None."""
    assert await store.fence_session("absent") is None
    await store.ensure_session("kept")
    await store.ensure_session("fenced")
    first = await store.fence_session("fenced")
    assert first is not None
    assert first.deleting
    assert first == await store.fence_session("fenced")
    assert [first] == list(await store.list_deleting_sessions())
    assert list(await store.list_deleting_sessions(limit=0)) == []


async def test_delete_session_preconditions(store: PostgresBindingStore) -> None:
    """Only a fenced Session with no intent and no binding is deleted."""
    assert await store.delete_session("absent") is False
    await store.ensure_session("s")
    with pytest.raises(PreconditionFailed, match="not fenced"):
        await store.delete_session("s")

    intent = await store.put_intent(make_intent("s"))
    await store.fence_session("s")
    with pytest.raises(PreconditionFailed, match="an intent"):
        await store.delete_session("s")

    binding = await store.put_binding(make_binding("s", "res-1"))
    with pytest.raises(PreconditionFailed, match="a sandbox binding"):
        await store.delete_session("s")
    assert await store.get_intent(intent.session_id) is None

    await store.delete_binding(binding)
    assert await store.delete_session("s") is True
    assert await store.get_session("s") is None
    assert await store.delete_session("s") is False


# --------------------------------------------------------------------- intents


async def test_put_intent_is_insert_if_absent(store: PostgresBindingStore) -> None:
    """The first intent is stored and returned to every later writer."""
    await store.ensure_session("s")
    first = make_intent("s", timeout=1)
    assert first == await store.put_intent(first)
    assert first == await store.put_intent(make_intent("s", timeout=2))
    assert first == await store.get_intent("s")


async def test_put_intent_needs_a_session(store: PostgresBindingStore) -> None:
    """No Session, no intent."""
    with pytest.raises(ProvisioningBlocked, match="does not exist"):
        await store.put_intent(make_intent("absent"))


async def test_fence_blocks_put_intent_and_is_projected(store: PostgresBindingStore) -> None:
    """A fenced Session refuses intents; existing ones show deleting=True."""
    await store.ensure_session("s")
    stored = await store.put_intent(make_intent("s"))
    await store.fence_session("s")
    with pytest.raises(ProvisioningBlocked, match="being deleted"):
        await store.put_intent(make_intent("s"))
    projected = attrs.evolve(stored, deleting=True)
    assert projected == await store.get_intent("s")
    assert [projected] == list(await store.list_intents("local"))


async def test_bound_session_blocks_put_intent(store: PostgresBindingStore) -> None:
    """A bound Session refuses a new intent."""
    await store.ensure_session("s")
    await store.put_binding(make_binding("s", "res-1"))
    with pytest.raises(ProvisioningBlocked, match="already bound"):
        await store.put_intent(make_intent("s"))
    assert await store.get_intent("s") is None


async def test_list_intents_filters_orders_and_limits(store: PostgresBindingStore) -> None:
    """One provider's intents, oldest first, at most limit."""
    stored = []
    for name, provider in (("s3", "local"), ("s1", "docker"), ("s2", "local"), ("s0", "local")):
        await store.ensure_session(name)
        stored.append(await store.put_intent(make_intent(name, provider)))
    local = [intent for intent in stored if intent.provider == "local"]
    assert local == list(await store.list_intents("local"))
    assert local[:2] == list(await store.list_intents("local", limit=2))
    assert list(await store.list_intents("local", limit=0)) == []
    assert list(await store.list_intents("e2b")) == []


async def test_delete_intent_compares_before_deleting(store: PostgresBindingStore) -> None:
    """Only the matching intent is deleted; a gone intent is success."""
    await store.ensure_session("s")
    stored = await store.put_intent(make_intent("s", timeout=1))
    with pytest.raises(PreconditionFailed, match="changed"):
        await store.delete_intent(make_intent("s", timeout=2))
    with pytest.raises(PreconditionFailed, match="changed"):
        await store.delete_intent(attrs.evolve(stored, provider="docker"))
    assert stored == await store.get_intent("s")
    await store.delete_intent(stored)
    assert await store.get_intent("s") is None
    await store.delete_intent(stored)


# -------------------------------------------------------------------- bindings


async def test_put_binding_elects_the_first_and_deletes_the_intent(
    store: PostgresBindingStore,
) -> None:
    """The first binding wins, later writers get it back, and the intent is gone."""
    await store.ensure_session("s")
    await store.put_intent(make_intent("s"))
    first = make_binding("s", "res-1")
    assert first == await store.put_binding(first)
    assert await store.get_intent("s") is None
    assert first == await store.put_binding(make_binding("s", "res-2"))
    assert first == await store.get_binding("s")


async def test_put_binding_needs_a_session(store: PostgresBindingStore) -> None:
    """A binding cannot point from a Session that does not exist."""
    with pytest.raises(ProvisioningBlocked, match="does not exist"):
        await store.put_binding(make_binding("absent", "res-1"))


async def test_put_binding_refuses_a_reference_of_another_session(
    store: PostgresBindingStore,
) -> None:
    """One provider resource belongs to one Session only."""
    await store.ensure_session("a")
    await store.ensure_session("b")
    await store.put_binding(make_binding("a", "res-1"))
    with pytest.raises(PreconditionFailed, match="another session"):
        await store.put_binding(make_binding("b", "res-1"))
    assert await store.get_binding("b") is None


async def test_delete_binding_compares_before_deleting(store: PostgresBindingStore) -> None:
    """Only the matching binding is deleted; a gone binding is success."""
    await store.ensure_session("s")
    stored = await store.put_binding(make_binding("s", "res-1"))
    with pytest.raises(PreconditionFailed, match="changed"):
        await store.delete_binding(make_binding("s", "res-2"))
    assert stored == await store.get_binding("s")
    await store.delete_binding(stored)
    assert await store.get_binding("s") is None
    await store.delete_binding(stored)


# ------------------------------------------------------------------------ races


async def test_concurrent_put_intent_elects_one_winner(database_url: str) -> None:
    """Thirty writers on three pools all get back the same stored intent."""
    stores = [await open_store(database_url, max_size=10) for _ in range(3)]
    try:
        await stores[0].ensure_session("s")
        results = await asyncio.gather(
            *(stores[i % 3].put_intent(make_intent("s", timeout=i + 1)) for i in range(30))
        )
        assert len(set(results)) == 1
        assert results[0] == await stores[1].get_intent("s")
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))


async def test_concurrent_put_binding_elects_one_winner(database_url: str) -> None:
    """Thirty workers publishing different resources agree on one binding."""
    stores = [await open_store(database_url, max_size=10) for _ in range(3)]
    try:
        await stores[0].ensure_session("s")
        await stores[0].put_intent(make_intent("s"))
        results = await asyncio.gather(
            *(stores[i % 3].put_binding(make_binding("s", f"res-{i}")) for i in range(30))
        )
        assert len(set(results)) == 1
        assert results[0] == await stores[2].get_binding("s")
        assert await stores[1].get_intent("s") is None
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))


async def test_put_intent_racing_put_binding_never_outlives_the_binding(
    database_url: str,
) -> None:
    """Intents written around a binding commit are either deleted by it or refused."""
    stores = [await open_store(database_url, max_size=10) for _ in range(2)]
    try:
        await stores[0].ensure_session("s")
        intents = [stores[i % 2].put_intent(make_intent("s", timeout=i + 1)) for i in range(20)]
        outcomes = await asyncio.gather(
            *intents[:10],
            stores[0].put_binding(make_binding("s", "res-1")),
            *intents[10:],
            return_exceptions=True,
        )
        for outcome in outcomes:
            assert not isinstance(outcome, BaseException) or isinstance(
                outcome, ProvisioningBlocked
            )
        assert make_binding("s", "res-1") == await stores[1].get_binding("s")
        assert await stores[1].get_intent("s") is None
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))


# ------------------------------------------------------- credentials and errors


async def test_no_credential_reaches_a_row(database_url: str) -> None:
    """After every kind of write, no row contains the password or the URL."""
    password = urlsplit(database_url).password
    async with await open_store(database_url) as store:
        await store.ensure_session("s")
        await store.put_intent(make_intent("s"))
        await store.put_binding(make_binding("s", "res-1"))
        await store.mark_binding_lost("s", make_binding("s", "res-1").ref)
        await store.ensure_session("t")
        await store.put_intent(make_intent("t"))
        await store.fence_session("t")
    dumps: list[str] = []
    for table in (
        "mango_schema_migrations",
        "mango_sessions",
        "mango_sandbox_provisioning_intents",
        "mango_sandbox_bindings",
    ):
        rows = await fetch_all(database_url, f"SELECT row_to_json(t)::text FROM {table} t")  # noqa: S608
        dumps.extend(str(row[0]) for row in rows)
    assert len(dumps) == len(load_migrations()) + 4  # migrations, 2 sessions, 1 intent, 1 binding
    text = "\n".join(dumps)
    assert "postgresql://" not in text
    if password:
        assert password not in text


async def test_unreachable_server_is_unavailable_and_redacted(refused_port: int) -> None:
    """A refused connection is ProviderUnavailable and its message hides the password."""
    port = refused_port
    url = f"postgresql://mango:s3cret-pw@127.0.0.1:{port}/mango"
    with pytest.raises(ProviderUnavailable) as caught:
        await open_store(url, timeout=5)
    assert "s3cret-pw" not in str(caught.value)
    assert "s3cret-pw" not in str(caught.value.__cause__)
    assert "password=***" in str(caught.value)
    assert "host=127.0.0.1" in str(caught.value)


@pytest.mark.parametrize(
    "conninfo",
    [
        "postgresql://mango:s3cret-pw@db.internal:5432/mango",
        "postgresql://mango@db.internal/mango?password=s3cret-pw",
        "postgresql://mango@db.internal/mango?sslpassword=s3cret-pw&sslmode=require",
        "postgresql://mango:s3cret%2Dpw@db.internal/mango",
        "host=db.internal user=mango password=s3cret-pw dbname=mango",
        "host=db.internal password='s3cret-pw with spaces' dbname=mango",
    ],
)
def test_redact_conninfo_masks_every_libpq_form(conninfo: str) -> None:
    """URL userinfo, query parameters and keywords (quoted or not) all lose their secret."""
    shown = redact_conninfo(conninfo)
    assert "s3cret" not in shown
    assert "db.internal" in shown
    assert "***" in shown
    assert redact_conninfo("postgresql://mango:s3cret-pw@[::1/mango") == (
        "<malformed connection string>"
    )


async def test_malformed_url_is_a_configuration_error_without_password() -> None:
    """libpq quotes a malformed URL; the error must not."""
    with pytest.raises(ConfigurationError) as caught:
        await open_store("postgresql://mango:s3cret-pw@[::1/mango")
    assert "s3cret-pw" not in str(caught.value)
    assert caught.value.__cause__ is None


async def test_closed_store_is_unavailable(database_url: str) -> None:
    """Using a closed store is a retryable ProviderUnavailable, not a psycopg error."""
    store = await open_store(database_url)
    await store.aclose()
    with pytest.raises(ProviderUnavailable):
        await store.get_session("s")


async def test_unstorable_value_is_invalid_input(store: PostgresBindingStore) -> None:
    """PostgreSQL cannot store NUL in JSON text; that is the caller's bad input."""
    await store.ensure_session("s")
    spec = SandboxSpec(image="bad\x00image")
    with pytest.raises(InvalidInput):
        await store.put_intent(ProvisioningIntent("s", "local", spec, spec_hash(spec)))


# ------------------------------------------------------- rows by column name


async def write_intent_row(url: str, session_id: str, spec: object, hash_value: str) -> None:
    """An intent row as some other writer left it: an earlier release, a newer one, a hand."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO mango_sandbox_provisioning_intents"
            " (session_id, provider, spec, spec_hash) VALUES (%s, 'local', %s, %s)",
            (session_id, Jsonb(spec), hash_value),
        )


STORED_HASH = "sha256:0123"
"""An opaque stored hash: reading a row never recomputes it."""


async def test_the_stored_spec_is_its_canonical_document(
    store: PostgresBindingStore, database_url: str
) -> None:
    """The intent's spec column holds the document its hash is computed from."""
    await store.ensure_session("s")
    spec = SandboxSpec(timeout=30.0, network="limited", network_allowed_hosts=["a.example"])
    await store.put_intent(ProvisioningIntent("s", "local", spec, spec_hash(spec)))
    [(stored,)] = await fetch_all(
        database_url, "SELECT spec FROM mango_sandbox_provisioning_intents"
    )
    assert stored == canonical_form(spec)
    assert stored == {"network": "limited", "network_allowed_hosts": ["a.example"], "timeout": 30}


async def test_an_intent_of_an_earlier_release_reads_back(
    store: PostgresBindingStore, database_url: str
) -> None:
    """A spec stored with every field (as before the canonical document) is the same spec."""
    spec = SandboxSpec(timeout=30, packages=PackagePlan(apt=["curl"]))
    await store.ensure_session("old")
    full = attrs.asdict(spec)
    full["network"] = "none"
    await write_intent_row(database_url, "old", full, STORED_HASH)
    intent = await store.get_intent("old")
    assert intent == ProvisioningIntent("old", "local", spec, STORED_HASH)
    assert [intent] == list(await store.list_intents("local"))


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"timeout": 30, "gpus": 1}, "extra fields found (gpus) @ row.spec"),
        ({"timeout": "30"}, "expected float, got str @ row.spec.timeout"),
        ({"packages": {"apt": "curl"}}, "expected a list, got str @ row.spec.packages.apt"),
        ({"network": "wide"}, "network must be one of none, bridge, limited, got 'wide'"),
    ],
    ids=["unknown-field", "wrong-type", "string-for-list", "bad-value"],
)
async def test_a_row_the_spec_cannot_hold_is_invalid_input_naming_the_field(
    store: PostgresBindingStore, database_url: str, spec: dict[str, object], problem: str
) -> None:
    """A stored spec with an unknown or wrong-typed field is refused, not guessed, and kept."""
    await store.ensure_session("s")
    await write_intent_row(database_url, "s", spec, "sha256v2:x")
    for read in (store.get_intent("s"), store.list_intents("local")):
        with pytest.raises(InvalidInput, match="provisioning intent of session 's'") as caught:
            await read
        assert problem in str(caught.value)
    rows = await fetch_all(database_url, "SELECT spec FROM mango_sandbox_provisioning_intents")
    assert [(spec,)] == rows


async def test_binding_rows_read_by_column_name(store: PostgresBindingStore) -> None:
    """A binding comes back with its reference and lost time (UTC) from named columns."""
    await store.ensure_session("s")
    stored = await store.put_binding(make_binding("s", "e-1"))
    assert stored == make_binding("s", "e-1")
    lost = await store.mark_binding_lost("s", SandboxRef("local", "e-1"))
    assert lost is not None
    assert lost.lost_at is not None
    assert lost.lost_at.utcoffset() == timedelta(0)
    assert await store.get_binding("s") == lost
