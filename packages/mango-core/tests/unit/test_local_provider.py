"""The local provider's lifecycle: create, attach, ownership and destroy."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

import mango.local
from mango.domain.capabilities import Capability, CapabilitySet, admit
from mango.domain.errors import (
    CapabilityNotSupported,
    InvalidInput,
    OwnershipError,
    SandboxNotFound,
)
from mango.domain.hashing import session_key_hash
from mango.domain.ports import Provider, Sandbox
from mango.domain.values import (
    Command,
    NetworkMode,
    PackagePlan,
    SandboxRef,
    SandboxSpec,
)
from mango.local import LocalProvider
from mango.provider.ownership import Ownership

SPEC = SandboxSpec()
KEY = "session-Alpha 1"


def entries(path: Path) -> list[str] | None:
    """Sorted names in the directory ``path`` (mango's empty record trees left out), or None."""
    try:
        children = sorted(path.iterdir())
    except FileNotFoundError:
        return None
    return [
        child.name
        for child in children
        if not (child.name in (".owners", ".runs") and not any(child.iterdir()))
    ]


def record(sandbox_ref: SandboxRef) -> Path:
    """The owner record of a local sandbox: beside its directory, not inside it."""
    session_dir = Path(sandbox_ref.external_id)
    return session_dir.parent / ".owners" / f"{session_dir.name}.json"


def canonical(path: Path) -> Path:
    """``path`` with symlinks resolved, as the provider spells references."""
    return path.resolve()


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"


@pytest.fixture
def provider(base: Path) -> LocalProvider:
    return LocalProvider(base)


def test_public_names_are_sorted_and_exported() -> None:
    """``mango.local.__all__`` is sorted and every name in it exists."""
    assert sorted(mango.local.__all__) == mango.local.__all__
    for name in mango.local.__all__:
        assert getattr(mango.local, name).__doc__


def test_provider_implements_the_port(provider: LocalProvider) -> None:
    """LocalProvider is a Provider named 'local' declaring the file API and background processes."""
    assert isinstance(provider, Provider)
    assert provider.name == "local"
    assert provider.capabilities == CapabilitySet.of(
        Capability.FILE_API, Capability.BACKGROUND_PROCESSES
    )


def test_docstring_says_it_is_not_an_isolation_boundary() -> None:
    """The package docstring warns plainly that local is not an isolation boundary."""
    assert mango.local.__doc__ is not None
    assert "NOT an isolation boundary" in mango.local.__doc__
    assert "declares two capabilities: ``file-api``" in mango.local.__doc__


@pytest.mark.parametrize(
    "spec",
    [
        SandboxSpec(packages=PackagePlan(pip=("requests",))),
        SandboxSpec(network=NetworkMode.LIMITED, network_allowed_hosts=("example.com",)),
    ],
)
def test_admission_rejects_capabilities(provider: LocalProvider, spec: SandboxSpec) -> None:
    """Packages and limited network are rejected at admission for local."""
    with pytest.raises(CapabilityNotSupported):
        admit(provider.name, provider.capabilities, spec)


def test_max_output_bytes_must_be_positive(base: Path) -> None:
    """A cap of zero is refused when the provider is built."""
    with pytest.raises(InvalidInput):
        LocalProvider(base, max_output_bytes=0)


async def test_create_layout_and_ref(provider: LocalProvider, base: Path) -> None:
    """Create makes mango-<name>/workspace and .owners/mango-<name>.json; the ref is the dir."""
    sandbox = await provider.create(KEY, SPEC)
    assert isinstance(sandbox, Sandbox)
    session_dir = canonical(base) / Ownership("local", provider.namespace).name(KEY)
    assert sandbox.ref == SandboxRef("local", str(session_dir))
    assert sandbox.root == str(session_dir / "workspace")
    assert (session_dir / "workspace").is_dir()
    marker = record(sandbox.ref).read_text()
    assert json.loads(marker) == {
        "format": 3,
        "provider": "local",
        "labels": {
            "io.mango.managed": "true",
            "io.mango.namespace": provider.namespace,
            "io.mango.session_key": session_key_hash(KEY),
        },
    }
    assert KEY not in marker
    assert sorted(p.name for p in session_dir.iterdir()) == ["workspace"]
    assert entries(session_dir.parent) == [".owners", ".runs", session_dir.name]


async def test_create_is_idempotent_across_instances(provider: LocalProvider, base: Path) -> None:
    """A fresh provider's create returns the same ref and keeps the workspace."""
    first = await provider.create(KEY, SPEC)
    await first.write_file("notes.txt", b"kept")
    again = await LocalProvider(base).create(KEY, SPEC)
    assert again.ref == first.ref
    assert await again.read_file("notes.txt") == b"kept"


async def test_distinct_keys_get_distinct_sandboxes(provider: LocalProvider) -> None:
    """Two keys never share a directory."""
    one = await provider.create("a", SPEC)
    two = await provider.create("b", SPEC)
    assert one.ref != two.ref


async def test_create_through_symlinked_base_gives_canonical_ref(tmp_path: Path) -> None:
    """The ref resolves a symlinked base, and attach accepts either spelling."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    sandbox = await LocalProvider(link).create(KEY, SPEC)
    assert sandbox.ref.external_id.startswith(str(real.resolve()) + "/")
    attached = await LocalProvider(real).attach(KEY, sandbox.ref, SPEC)
    assert attached.ref == sandbox.ref


@pytest.mark.parametrize("key", ["", " padded ", "bad\nkey"])
async def test_invalid_session_key(provider: LocalProvider, base: Path, key: str) -> None:
    """An empty or malformed key is InvalidInput and creates nothing."""
    with pytest.raises(InvalidInput):
        await provider.create(key, SPEC)
    with pytest.raises(InvalidInput):
        await provider.attach(key, SandboxRef("local", str(base / "x")), SPEC)
    assert entries(base) is None


async def test_attach_from_fresh_instance(provider: LocalProvider, base: Path) -> None:
    """Attach from a new provider instance reaches the same workspace."""
    created = await provider.create(KEY, SPEC)
    await created.write_file("a/b.txt", b"data")
    attached = await LocalProvider(base).attach(KEY, created.ref, SPEC)
    assert attached.ref == created.ref
    assert attached.root == created.root
    assert await attached.read_file("a/b.txt") == b"data"


async def test_attach_foreign_key_is_ownership_error(provider: LocalProvider) -> None:
    """A ref created for one key cannot be attached by another key."""
    created = await provider.create(KEY, SPEC)
    await provider.create("other", SPEC)
    with pytest.raises(OwnershipError):
        await provider.attach("other", created.ref, SPEC)


async def test_attach_wrong_provider_is_ownership_error(provider: LocalProvider) -> None:
    """A ref of another provider is refused even if the path matches."""
    created = await provider.create(KEY, SPEC)
    with pytest.raises(OwnershipError):
        await provider.attach(KEY, SandboxRef("docker", created.ref.external_id), SPEC)


@pytest.mark.parametrize(
    "external_id",
    ["relative/path", "not a path", "/", "/etc"],
)
async def test_attach_malformed_ref_is_ownership_error(
    provider: LocalProvider, external_id: str
) -> None:
    """A ref that is not this key's directory is refused."""
    await provider.create(KEY, SPEC)
    with pytest.raises(OwnershipError):
        await provider.attach(KEY, SandboxRef("local", external_id), SPEC)


async def test_attach_symlink_loop_ref_is_ownership_error(
    provider: LocalProvider, base: Path
) -> None:
    """A ref through a symlink loop is refused, not an unexpected error."""
    await provider.create(KEY, SPEC)
    loop = base / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OwnershipError):
        await provider.attach(KEY, SandboxRef("local", str(loop / "x")), SPEC)


def test_relative_base_dir_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative base is fixed at construction; a later chdir does not move it."""
    monkeypatch.chdir(tmp_path)
    provider = LocalProvider(Path("rel"))
    assert provider.base_dir == tmp_path / "rel"


async def test_attach_non_canonical_spelling_is_accepted(provider: LocalProvider) -> None:
    """A ref spelled with '.' and '//' still names the same directory."""
    created = await provider.create(KEY, SPEC)
    parent, name = created.ref.external_id.rsplit("/", 1)
    spelled = SandboxRef("local", f"{parent}/.//{name}")
    assert (await provider.attach(KEY, spelled, SPEC)).ref == created.ref


async def test_attach_with_tampered_marker_is_ownership_error(provider: LocalProvider) -> None:
    """A marker altered on disk makes attach refuse the directory."""
    created = await provider.create(KEY, SPEC)
    marker = record(created.ref)
    marker.chmod(0o644)
    document = json.loads(marker.read_text())
    document["labels"]["io.mango.session_key"] = session_key_hash("someone else")
    marker.write_text(json.dumps(document))
    with pytest.raises(OwnershipError):
        await provider.attach(KEY, created.ref, SPEC)


async def test_attach_with_missing_marker_is_ownership_error(provider: LocalProvider) -> None:
    """A session directory without its marker is not trusted."""
    created = await provider.create(KEY, SPEC)
    record(created.ref).unlink()
    with pytest.raises(OwnershipError):
        await provider.attach(KEY, created.ref, SPEC)


async def test_create_refuses_a_foreign_marker(provider: LocalProvider) -> None:
    """Create does not adopt a directory whose marker names another key."""
    created = await provider.create(KEY, SPEC)
    marker = record(created.ref)
    marker.chmod(0o644)
    marker.write_text("{}")
    with pytest.raises(OwnershipError):
        await provider.create(KEY, SPEC)


async def test_attach_missing_directory_is_not_found(provider: LocalProvider, base: Path) -> None:
    """A ref whose directory vanished is SandboxNotFound, and nothing is recreated."""
    created = await provider.create(KEY, SPEC)
    shutil.rmtree(created.ref.external_id)
    with pytest.raises(SandboxNotFound):
        await provider.attach(KEY, created.ref, SPEC)
    assert entries(Path(created.ref.external_id)) is None


async def test_ownership_checked_even_if_base_is_gone(provider: LocalProvider, base: Path) -> None:
    """With the whole base deleted, the own ref is not found and a foreign one is refused."""
    created = await provider.create(KEY, SPEC)
    foreign = await provider.create("other", SPEC)
    shutil.rmtree(base)
    with pytest.raises(SandboxNotFound):
        await provider.attach(KEY, created.ref, SPEC)
    with pytest.raises(OwnershipError):
        await provider.attach(KEY, foreign.ref, SPEC)
    assert entries(base) is None


async def test_destroy_then_attach_is_not_found(provider: LocalProvider, base: Path) -> None:
    """After destroy the directory is gone and attach raises SandboxNotFound."""
    created = await provider.create(KEY, SPEC)
    await created.write_file("x", b"1")
    await created.destroy()
    assert entries(base) == []
    with pytest.raises(SandboxNotFound):
        await LocalProvider(base).attach(KEY, created.ref, SPEC)


def tree(path: Path) -> set[str]:
    """Every path under ``path``, relative to it."""
    return {str(child.relative_to(path)) for child in path.rglob("*")}


async def test_destroy_twice_succeeds(provider: LocalProvider, base: Path) -> None:
    """The first destroy removes what the sandbox held; later ones, from any client, are no-ops."""
    created = await provider.create(KEY, SPEC)
    await created.write_file("x", b"1")
    attached = await provider.attach(KEY, created.ref, SPEC)
    neighbour = await provider.create("neighbour", SPEC)
    await neighbour.write_file("y", b"2")
    name = Path(created.ref.external_id).name
    before = tree(base)
    held = {path for path in before if name in path}
    assert f"{name}/workspace/x" in held
    assert f".owners/{name}.json" in held

    await created.destroy()
    after_first = tree(base)
    assert after_first == before - held
    with pytest.raises(SandboxNotFound):
        await LocalProvider(base).attach(KEY, created.ref, SPEC)

    for client in (created, attached):
        await client.destroy()
        assert tree(base) == after_first
    assert await neighbour.read_file("y") == b"2"


async def test_destroy_removes_leftovers_of_an_interrupted_destroy(
    provider: LocalProvider, base: Path
) -> None:
    """A half-deleted tree left by a crash is cleaned by the next destroy."""
    created = await provider.create(KEY, SPEC)
    session_dir = Path(created.ref.external_id)
    leftover = session_dir.with_name(session_dir.name + ".deleting-0123")
    (leftover / "workspace").mkdir(parents=True)
    await created.destroy()
    assert entries(base) == []


async def test_operations_after_destroy_are_not_found(provider: LocalProvider) -> None:
    """Exec and file access on a destroyed sandbox raise SandboxNotFound."""
    sandbox = await provider.create(KEY, SPEC)
    await sandbox.destroy()
    with pytest.raises(SandboxNotFound):
        await sandbox.exec(Command(("true",)))
    with pytest.raises(SandboxNotFound):
        await sandbox.read_file("x")
    with pytest.raises(SandboxNotFound):
        await sandbox.write_file("x", b"")


async def test_create_after_destroy_starts_empty(provider: LocalProvider) -> None:
    """Create after destroy gives the same ref with an empty workspace."""
    first = await provider.create(KEY, SPEC)
    await first.write_file("x", b"1")
    await first.destroy()
    second = await provider.create(KEY, SPEC)
    assert second.ref == first.ref
    with pytest.raises(FileNotFoundError):
        await second.read_file("x")


async def test_cancelled_task_creates_nothing(provider: LocalProvider, base: Path) -> None:
    """A task cancelled before create runs leaves no directory behind."""

    async def cancel_then_create() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await provider.create(KEY, SPEC)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(cancel_then_create())
    assert entries(base) is None


async def test_aclose_leaves_sandboxes(provider: LocalProvider, base: Path) -> None:
    """aclose releases nothing durable: sandboxes stay attachable."""
    created = await provider.create(KEY, SPEC)
    await provider.aclose()
    assert (await LocalProvider(base).attach(KEY, created.ref, SPEC)).ref == created.ref
