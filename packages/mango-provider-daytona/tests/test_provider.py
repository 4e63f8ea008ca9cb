"""Daytona specifics beyond the conformance suite: names, labels, units, files, plugin."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from mango.fakes import FakeService
from mango.provider import (
    Command,
    FileTooLarge,
    InvalidInput,
    NetworkMode,
    OwnershipError,
    ProviderContext,
    Quirk,
    SandboxNotFound,
    SandboxRef,
    SandboxSpec,
    SupportLevel,
)
from mango.provider.ownership import LABEL_MANAGED, LABEL_NAMESPACE, LABEL_SESSION
from mango_provider_daytona import DaytonaProvider, DaytonaSandbox, memory_gib
from mango_provider_daytona.settings import (
    AUTO_PAUSE_ENV,
    REGISTRATION,
    open_daytona_provider,
    read_daytona_settings,
)

from .conftest import NAMESPACE

Opener = Callable[..., DaytonaProvider]


def test_registration_is_a_preview_with_the_output_at_end_quirk() -> None:
    """The plugin registers ``daytona`` as preview, declaring the output-at-end quirk and
    at-least-once steps."""
    from mango.plugins import load_plugins

    registration = load_plugins(entry_points=True).providers().get("daytona")
    assert registration is REGISTRATION
    assert registration.support_level is SupportLevel.PREVIEW
    assert registration.quirks == {Quirk.OUTPUT_AT_END, Quirk.STEPS_AT_LEAST_ONCE}
    assert [setting.env for setting in registration.settings if setting.secret] == [
        "DAYTONA_API_KEY"
    ]


def test_settings_defaults_and_validation() -> None:
    """Defaults, the auto-pause minutes, and a clear error for a bad value."""
    settings = read_daytona_settings({"DAYTONA_API_KEY": "k"})
    assert settings.api_url == "https://app.daytona.io/api"
    assert settings.auto_pause_minutes == 15
    assert (
        read_daytona_settings({"DAYTONA_API_KEY": "k", AUTO_PAUSE_ENV: "0"}).auto_pause_minutes == 0
    )
    with pytest.raises(Exception, match=AUTO_PAUSE_ENV):
        read_daytona_settings({"DAYTONA_API_KEY": "k", AUTO_PAUSE_ENV: "soon"})
    with pytest.raises(Exception, match="DAYTONA_API_URL"):
        read_daytona_settings({"DAYTONA_API_KEY": "k", "DAYTONA_API_URL": "ftp://x"})
    provider = open_daytona_provider(ProviderContext("ns-1", {"DAYTONA_API_KEY": "k"}))
    assert (provider.namespace, provider.auto_pause_minutes) == ("ns-1", 15)


@pytest.mark.parametrize(
    ("text", "gib"),
    [("512m", 1), ("1g", 1), ("2G", 2), ("1.5g", 2), ("2048MiB", 2), ("3gb", 3), ("1073741824", 1)],
)
def test_memory_is_sent_in_whole_gib(text: str, gib: int) -> None:
    """Docker-style sizes become the GB the Daytona API expects (512m is 1, never 512)."""
    assert memory_gib(text) == gib


def test_bad_memory_is_invalid_input() -> None:
    """A size that is not one raises InvalidInput."""
    with pytest.raises(InvalidInput):
        memory_gib("lots")


@pytest.mark.parametrize(
    ("memory", "gib"),
    [("2Gi", 2), ("512Mi", 1), ("1.5GiB", 2), (3 << 30, 3), ((3 << 30) + 1, 4), ("1p", 1 << 20)],
)
def test_the_parsed_size_is_sent_in_whole_gib(memory: str | int, gib: int) -> None:
    """Every spelling of the one grammar (Kubernetes' 2Gi too) is translated from its bytes."""
    spec = SandboxSpec(memory=memory)  # type: ignore[arg-type]
    assert spec.memory_bytes is not None
    assert memory_gib(spec.memory_bytes) == gib


async def test_name_and_labels_carry_the_namespace(
    service: FakeService, provider: DaytonaProvider, session_key: str, open_provider: Opener
) -> None:
    """The deterministic name and labels are namespace-aware; another namespace gets its own."""
    sandbox = await provider.create(session_key, SandboxSpec())
    record = service.sandboxes.get(sandbox.ref.external_id)
    assert record.extra["name"] == provider.ownership.name(session_key)
    assert record.metadata[LABEL_MANAGED] == "true"
    assert record.metadata[LABEL_NAMESPACE] == NAMESPACE
    assert record.metadata[LABEL_SESSION] == provider.ownership.session_hash(session_key)
    other = open_provider(namespace="other-deployment")
    assert await other.find(session_key) is None
    with pytest.raises(OwnershipError):
        await other.attach(session_key, sandbox.ref, SandboxSpec())
    with pytest.raises(OwnershipError):
        await other.destroy(session_key, sandbox.ref)
    theirs = await other.create(session_key, SandboxSpec())
    assert theirs.ref != sandbox.ref
    assert await other.list_owned() == [
        item for item in await other.list_owned() if item.ref == theirs.ref
    ]
    await theirs.destroy()
    await sandbox.destroy()


async def test_create_body_network_pause_and_units(
    service: FakeService, open_provider: Opener, session_key: str
) -> None:
    """What create sends: network blocked unless bridge, auto-pause minutes, GiB memory, cpus."""
    provider = open_provider(image="python:3.12-slim", auto_pause_minutes=7, target="eu")
    spec = SandboxSpec(memory="512m", cpus=1.5, network=NetworkMode.BRIDGE)
    sandbox = await provider.create(session_key, spec)
    extra = service.sandboxes.get(sandbox.ref.external_id).extra
    assert extra["memory"] == 1
    assert extra["cpu"] == 2
    assert extra["networkBlockAll"] is False
    assert extra["autoPauseInterval"] == 7
    assert extra["autoDeleteInterval"] == -1
    assert extra["target"] == "eu"
    assert extra["buildInfo"] == {"dockerfileContent": "FROM python:3.12-slim\n"}
    blocked = await provider.create(session_key + "-none", SandboxSpec())
    assert service.sandboxes.get(blocked.ref.external_id).extra["networkBlockAll"] is True
    with pytest.raises(InvalidInput, match="image"):
        await open_provider().create(session_key + "-x", SandboxSpec(memory="1g"))
    kube = await provider.create(session_key + "-k", SandboxSpec(memory="2Gi", cpus="500m"))
    kube_extra = service.sandboxes.get(kube.ref.external_id).extra
    assert (kube_extra["memory"], kube_extra["cpu"]) == (2, 1)
    await kube.destroy()
    await sandbox.destroy()
    await blocked.destroy()


async def test_find_list_owned_and_health(provider: DaytonaProvider, session_key: str) -> None:
    """find and list_owned see the sandbox (and nothing after destroy); health is a round trip."""
    assert await provider.find(session_key) is None
    sandbox = await provider.create(session_key, SandboxSpec())
    assert await provider.find(session_key) == sandbox.ref
    owned = await provider.list_owned()
    assert [item.ref for item in owned] == [sandbox.ref]
    assert owned[0].session_hash == provider.ownership.session_hash(session_key)
    assert "answers" in await provider.health()
    await provider.destroy(session_key, sandbox.ref)
    await provider.destroy(session_key, sandbox.ref)
    assert await provider.find(session_key) is None
    assert await provider.list_owned() == []
    with pytest.raises(SandboxNotFound):
        await provider.attach(session_key, sandbox.ref, SandboxSpec())


async def test_malformed_refs(provider: DaytonaProvider) -> None:
    """A reference that is no Daytona id is InvalidInput; another provider's, OwnershipError."""
    with pytest.raises(InvalidInput):
        await provider.attach("k", SandboxRef("daytona", "../../etc"), SandboxSpec())
    with pytest.raises(OwnershipError):
        await provider.attach("k", SandboxRef("docker", "abc"), SandboxSpec())


async def test_read_file_bound_and_open_file_stream(sandbox: DaytonaSandbox) -> None:
    """read_file stops at its bound (FileTooLarge with size and limit); open_file streams all."""
    data = bytes(range(256)) * 4096  # 1 MiB
    await sandbox.write_file("big.bin", data)
    with pytest.raises(FileTooLarge) as caught:
        await sandbox.read_file("big.bin", max_bytes=1000)
    assert (caught.value.size, caught.value.limit) == (len(data), 1000)
    assert await sandbox.read_file("big.bin", max_bytes=len(data)) == data
    async with sandbox.open_file("big.bin") as stream:
        chunks = [chunk async for chunk in stream]
    assert b"".join(chunks) == data
    with pytest.raises(FileNotFoundError):
        async with sandbox.open_file("nope.bin"):
            pass


@pytest.mark.parametrize("data", [5, "text", None])
async def test_a_write_of_anything_but_bytes_is_invalid_input_and_sends_nothing(
    service: FakeService, sandbox: DaytonaSandbox, data: object
) -> None:
    """A non-bytes value is refused before any request: no file, no directory appears."""
    before = len(service.faults.log)
    with pytest.raises(InvalidInput, match="takes bytes"):
        await sandbox.write_file("made/x.bin", data)  # type: ignore[arg-type]
    assert len(service.faults.log) == before
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("made/x.bin")


async def test_large_stdin_is_staged(sandbox: DaytonaSandbox) -> None:
    """Stdin too large for the command line goes through the file API and arrives exact."""
    payload = bytes(range(256)) * 1024  # 256 KiB: staged, not inlined
    result = await sandbox.exec(Command(("sh", "-c", "cat | wc -c"), stdin=payload))
    assert result.stdout.strip() == str(len(payload)).encode()
    echoed = await sandbox.exec(Command(("cat",), stdin=payload))
    assert echoed.stdout == payload


async def test_destroy_while_running_gives_cancelled(
    sandbox: DaytonaSandbox, service: FakeService
) -> None:
    """A command running when its sandbox is destroyed ends with cancelled=True."""
    async with service.sandboxes.get(sandbox.ref.external_id).beacon("started") as started:
        command = Command(("sh", "-c", "echo up > started; sleep 300"))
        task = asyncio.ensure_future(sandbox.exec(command))
        await started.wait(30)  # the command runs (TimeoutError naming the beacon if not)
    await sandbox.destroy()
    result = await asyncio.wait_for(task, 30)
    assert (result.cancelled, result.exit_code) == (True, -1)


async def test_output_is_capped_inside_the_sandbox(sandbox: DaytonaSandbox) -> None:
    """A flood keeps the cap, flags the truncation, and leaves no control files behind."""
    listing = Command(("sh", "-c", 'ls -A "${TMPDIR:-/tmp}/.mango-exec"'))
    before = set((await sandbox.exec(listing)).stdout.split())
    result = await sandbox.exec(
        Command(("sh", "-c", "head -c 5000000 /dev/zero; head -c 3000000 /dev/zero >&2"))
    )
    assert (len(result.stdout), len(result.stderr)) == (1 << 20, 1 << 20)
    assert result.stdout_truncated
    assert result.stderr_truncated
    after = set((await sandbox.exec(listing)).stdout.split())
    # Only the second listing's own files (one token) are new: the flood left nothing.
    assert len({name.split(b".")[0] for name in after - before}) == 1


async def test_keep_alive_after_a_recent_command_costs_no_request(
    service: FakeService, sandbox: DaytonaSandbox
) -> None:
    """Right after a command the sandbox is known to run: keep_alive makes no API call."""
    await sandbox.keep_alive()
    gets = service.faults.count("GET", "/sandbox/{id}")
    assert gets >= 1
    await sandbox.exec(Command(("true",)))
    await sandbox.keep_alive()
    assert service.faults.count("GET", "/sandbox/{id}") == gets


async def test_file_api_describes_a_long_listing_in_batches(
    sandbox: DaytonaSandbox, service: FakeService
) -> None:
    """A listing past one stat line's batch is described in several lines, all of it, in order."""
    made = await sandbox.exec(
        Command(
            ("sh", "-c", 'mkdir -p many && cd many && for i in $(seq 0 249); do : > "n$i"; done')
        )
    )
    assert made.exit_code == 0, made.stderr
    before = service.faults.count("POST", "/toolbox/{id}/process/execute")
    listing = await sandbox.list_dir("many", limit=250)
    assert sorted(entry.name for entry in listing.entries) == sorted(f"n{i}" for i in range(250))
    assert [entry.path for entry in listing.entries] == sorted(e.path for e in listing.entries)
    assert not listing.truncated
    assert {entry.kind.value for entry in listing.entries} == {"file"}
    # One classification, one stat of the directory, two stat lines (200 paths, then 50).
    assert service.faults.count("POST", "/toolbox/{id}/process/execute") - before == 4
