"""Pure parts: Connect framing, exit codes, durations, settings, registration."""

from __future__ import annotations

import pytest

from mango.plugins import load_plugins
from mango.provider import ConfigurationError, ProviderContext, SupportLevel
from mango.provider.http import RemoteUnavailable
from mango_provider_e2b import parse_duration, read_e2b_options
from mango_provider_e2b.connect import (
    END_STREAM,
    ConnectError,
    decode_envelopes,
    encode_envelope,
    end_stream,
)
from mango_provider_e2b.envd import exit_code_of
from mango_provider_e2b.fake.processes import go_status
from mango_provider_e2b.settings import open_e2b_provider


async def _chunks(data: bytes, size: int):  # type: ignore[no-untyped-def]
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("size", [1, 3, 7, 4096])
async def test_envelopes_decode_across_any_chunking(size: int) -> None:
    """Envelopes split anywhere by the transport decode to the same sequence."""
    stream = (
        encode_envelope({"event": {"start": {"pid": 7}}})
        + encode_envelope({"event": {"data": {"stdout": "aGk="}}})
        + end_stream(ConnectError("deadline_exceeded", "late"))
    )
    envelopes = [envelope async for envelope in decode_envelopes(_chunks(stream, size))]
    assert [envelope.payload.get("event") for envelope in envelopes[:2]] == [
        {"start": {"pid": 7}},
        {"data": {"stdout": "aGk="}},
    ]
    assert envelopes[2].flags == END_STREAM
    assert envelopes[2].error == ConnectError("deadline_exceeded", "late")


@pytest.mark.parametrize(
    "stream",
    [
        b"\x01\x00\x00\x00\x02{}",  # compressed, never negotiated
        b"\x04\x00\x00\x00\x02{}",  # unknown flag
        b"\x00\x00\x00\x00\x02[]",  # not an object
        b"\x00\x00\x00\x00\x05{",  # cut inside an envelope
        b"\x00\x7f\xff\xff\xff",  # over the size limit
    ],
)
async def test_malformed_streams_are_remote_unavailable(stream: bytes) -> None:
    """A stream that is not Connect JSON is a retryable protocol error, not a crash."""
    with pytest.raises(RemoteUnavailable):
        async for _ in decode_envelopes(_chunks(stream, 64)):
            pass


@pytest.mark.parametrize("returncode", [0, 1, 7, 127, 255, -9, -15, -11])
def test_exit_codes_round_trip_through_envds_end_event(returncode: int) -> None:
    """What the fake reports as envd does, mango reads back shell-style (128 + signal)."""
    expected = returncode if returncode >= 0 else 128 - returncode
    assert exit_code_of(go_status(returncode)) == expected


def test_exit_code_fallbacks() -> None:
    """exit_code, status text, exited-without-code and nothing at all."""
    assert exit_code_of({"exit_code": 3}) == 3
    assert exit_code_of({"exited": True}) == 0
    assert exit_code_of({"status": "signal: signal 40"}) == 168
    assert exit_code_of({}) == -1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("300", 300.0), ("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("1.5m", 90.0)],
)
def test_durations(text: str, seconds: float) -> None:
    """Go durations and bare seconds."""
    assert parse_duration("X", text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "5 minutes", "m", "1x", "nan"])
def test_bad_durations_name_the_variable(text: str) -> None:
    """Unparsable or non-positive durations are configuration errors naming the setting."""
    with pytest.raises(ConfigurationError, match="E2B_IDLE_TIMEOUT"):
        parse_duration("E2B_IDLE_TIMEOUT", text)


def test_missing_api_key_is_a_clear_configuration_error() -> None:
    """No E2B_API_KEY: the factory fails at open time, naming the variable."""
    with pytest.raises(ConfigurationError, match="E2B_API_KEY"):
        open_e2b_provider(ProviderContext(namespace="n", environ={}))


def test_settings_are_validated_and_the_key_is_never_shown() -> None:
    """Defaults, overrides, invalid URLs; the key stays out of repr."""
    options = read_e2b_options({"E2B_API_KEY": "sekrit-key-123", "E2B_IDLE_TIMEOUT": "7m"})
    assert options.api_url == "https://api.e2b.app"
    assert options.template == "base"
    assert options.domain == "e2b.app"
    assert options.idle_timeout == 420.0
    assert options.shared_envd_url is None
    assert "sekrit-key-123" not in repr(options)
    with pytest.raises(ConfigurationError, match="E2B_API_URL"):
        read_e2b_options({"E2B_API_KEY": "k", "E2B_API_URL": "ftp://x"})
    with pytest.raises(ConfigurationError, match="E2B_SANDBOX_URL"):
        read_e2b_options({"E2B_API_KEY": "k", "E2B_SANDBOX_URL": "nohost"})


def test_registration_is_preview_with_its_settings() -> None:
    """`mango providers` lists e2b and cube as preview, with their settings."""
    registry = load_plugins(entry_points=True).providers()
    e2b = registry.get("e2b")
    cube = registry.get("cube")
    assert e2b.support_level is SupportLevel.PREVIEW
    assert cube.support_level is SupportLevel.PREVIEW
    assert {"E2B_API_KEY", "E2B_IDLE_TIMEOUT", "E2B_SANDBOX_URL"} <= {s.env for s in e2b.settings}
    assert {"CUBE_API_URL", "CUBE_PROXY_NODE_IP", "CUBE_IDLE_TIMEOUT"} <= {
        s.env for s in cube.settings
    }
    assert next(s for s in e2b.settings if s.env == "E2B_API_KEY").secret


@pytest.mark.parametrize(
    ("info", "kind", "mode"),
    [
        # envd since e2b-dev/infra#924: a link has its target's type, and symlinkTarget.
        ({"type": "FILE_TYPE_FILE", "symlinkTarget": "/w/a", "mode": 420}, "symlink", None),
        ({"symlinkTarget": "/w/dangling"}, "symlink", None),  # no type: the target is missing
        ({"type": "FILE_TYPE_DIRECTORY", "isSymlink": True}, "symlink", None),  # the SDK's newer
        ({"type": "FILE_TYPE_SYMLINK"}, "symlink", None),  # envd before either
        ({"type": "FILE_TYPE_FILE", "mode": 416}, "regular", 0o640),
        ({"type": "FILE_TYPE_DIRECTORY", "mode": 493}, "directory", 0o755),
        ({}, "other", None),
    ],
)
def test_envd_entries_know_a_link_by_its_target_field(
    info: dict[str, object], kind: str, mode: int | None
) -> None:
    """envd's EntryInfo: a link is a link whatever its type says; sizes travel as strings."""
    from mango_provider_e2b.envd import native_entry

    entry = native_entry(
        {"path": "/w/x", "size": "12", "modifiedTime": "2026-01-02T03:04:05.123456789Z", **info},
        "stat",
    )
    assert (entry.kind.value, entry.size, entry.mode) == (kind, 12, mode)
    assert entry.mtime is not None
    assert entry.mtime.isoformat() == "2026-01-02T03:04:05.123456+00:00"
