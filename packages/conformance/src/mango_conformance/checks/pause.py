"""The ``pause`` and ``exposed-ports`` groups: explicit pause and resume, a URL for a port.

``pause`` (:class:`~mango.provider.PausableSandbox` and
:class:`~mango.provider.PausableProvider`): a pause keeps the workspace; a
command running when the sandbox pauses is frozen with it and finishes only
after the resume; pause and resume are idempotent, in either form; and the
backend holds the state: a fresh provider instance sees the pause, and
resumes it by reference. A data-plane call into a paused sandbox may be
served, held until the resume or refused: the checks accept each. These need nothing but a sandbox.

``exposed-ports`` (:class:`~mango.provider.PortSandbox`): a small HTTP
server started in the sandbox (busybox ``httpd``, else ``python3 -m
http.server``) serves a token that this process fetches through the URL
``expose_port`` returns, with the headers it came with (a preview
token), and a destroyed sandbox's port is ``SandboxNotFound``. Which port,
and on which network, is the target's testbed
(:class:`~mango.provider.PortTestbed`): Docker publishes a port only when
it creates a container. A declared capability whose target has
no port testbed fails, as for the network checks.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping

import attrs
import pytest

from mango.provider import (
    Capability,
    ExposedPort,
    InvalidInput,
    MangoError,
    PausableProvider,
    PausableSandbox,
    PortSandbox,
    Sandbox,
    SandboxNotFound,
)
from mango_conformance.checks import mark_checks
from mango_conformance.checks.capabilities import no_testbed
from mango_conformance.harness import Harness

__all__ = ["SERVE", "SERVER_START_SECONDS", "WAIT_FOR_GO", "PauseChecks", "PortChecks"]

WAIT_FOR_GO = "touch started; while [ ! -e go ]; do sleep 0.01; done; touch seen; echo done"
"""A command that says it started, waits for the file ``go``, then says it saw it."""

SERVE = (
    'if command -v httpd >/dev/null 2>&1; then exec httpd -f -p "$1" -h .; fi; '
    'exec python3 -m http.server "$1" --bind 0.0.0.0'
)
"""``sh -c SERVE sh PORT``: an HTTP server of the working directory on PORT, in the foreground."""

_POLL = 0.05
SERVER_START_SECONDS = 10.0
"""How long a small HTTP server in the sandbox may take to answer through its URL."""


def _pausable(sandbox: Sandbox) -> PausableSandbox:
    assert isinstance(sandbox, PausableSandbox), "the sandbox does not implement PausableSandbox"
    return sandbox


def _provider(harness: Harness) -> PausableProvider:
    provider = harness.open_provider()
    assert isinstance(provider, PausableProvider), (
        "a provider declaring pause must implement PausableProvider (pause and resume by "
        "reference, which SessionManager calls)"
    )
    return provider


async def _until(
    harness: Harness,
    found: Callable[[], Awaitable[bool]],
    what: str | Callable[[], str],
    bound: float | None = None,
) -> None:
    """Poll ``found`` until it answers True (bounded by ``bound``, else the operation timeout)."""
    deadline = time.monotonic() + (harness.options.operation_timeout if bound is None else bound)
    while not await found():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what if isinstance(what, str) else what()} did not happen")
        await asyncio.sleep(_POLL)


def _outcome(task: asyncio.Task[object]) -> str:
    """What a finished task ended with, for a failure message."""
    if task.cancelled():
        return "cancelled"
    error = task.exception()
    return repr(error) if error is not None else repr(task.result())


async def _exists(sandbox: Sandbox, path: str) -> bool:
    try:
        await sandbox.read_file(path)
    except FileNotFoundError:
        return False
    return True


class PauseChecks:
    """Capability ``pause``: the backend keeps the sandbox while it runs nothing."""

    @pytest.mark.mango_capability(Capability.PAUSE.value)
    def test_pause_keeps_the_workspace(self, conformance: Harness) -> None:
        """A file written before the pause reads back after the resume; commands run again."""
        sandbox = conformance.create()
        pausable = _pausable(sandbox)
        data = secrets.token_bytes(4096)
        conformance.run(sandbox.write_file("kept.bin", data))
        conformance.run(pausable.pause(), "pause")
        assert conformance.run(pausable.is_paused()), "is_paused() is False after pause()"
        conformance.run(pausable.resume(), "resume")
        assert not conformance.run(pausable.is_paused()), "is_paused() is True after resume()"
        assert conformance.run(sandbox.read_file("kept.bin")) == data, "the pause lost the file"
        result = conformance.sh(sandbox, 'cat kept.bin | wc -c | tr -d " "')
        assert (result.exit_code, result.stdout.strip()) == (0, b"4096"), result

    @pytest.mark.mango_capability(Capability.PAUSE.value)
    def test_paused_sandbox_runs_nothing_until_resumed(self, conformance: Harness) -> None:
        """A command running at the pause is frozen: it finishes only after the resume.

        A second, running sandbox is the clock (no sleeping): both commands
        get their ``go`` (the paused one first), and once the running one
        has seen it, the paused one must not have ended, nor failed. A
        backend may serve the paused one's write (Docker writes into a
        frozen container's filesystem), hold it until the resume (a frozen
        daemon in the sandbox: OpenSandbox) or refuse it; only a served
        write can be looked behind, and then ``seen`` must be absent. After
        the resume the command gets its ``go`` (again, if it was refused)
        and ends with its output.
        """
        key = conformance.new_key("pause")
        sandbox = conformance.create(key)
        clock = conformance.create()
        pausable = _pausable(sandbox)
        fresh = _provider(conformance)

        async def scenario() -> None:
            frozen = asyncio.create_task(sandbox.exec(conformance.command(WAIT_FOR_GO)))
            running = asyncio.create_task(clock.exec(conformance.command(WAIT_FOR_GO)))
            go: asyncio.Task[None] | None = None
            try:
                await _until(conformance, lambda: _exists(sandbox, "started"), "a start")
                await _until(conformance, lambda: _exists(clock, "started"), "a start")
                await pausable.pause()
                # The paused sandbox's write goes first; a backend that serves it
                # answers within the clock's whole round below.
                go = asyncio.create_task(sandbox.write_file("go", b""))
                await clock.write_file("go", b"")
                await _until(conformance, lambda: _exists(clock, "seen"), "the running command")
                await asyncio.wait_for(running, conformance.options.operation_timeout)
                # The backend's word, through another provider instance (pause again: a no-op).
                await fresh.pause(key, sandbox.ref)
                assert await pausable.is_paused(), "the sandbox is not paused"
                assert not frozen.done(), (
                    f"a command ended while its sandbox was paused: {_outcome(frozen)}"
                )
                if go.done() and go.exception() is None:
                    assert not await _exists(sandbox, "seen"), "a paused sandbox ran a command on"
                await pausable.resume()
                with contextlib.suppress(MangoError):
                    await asyncio.wait_for(go, conformance.options.operation_timeout)
                if go.exception() is not None:
                    await sandbox.write_file("go", b"")
                result = await asyncio.wait_for(frozen, conformance.options.operation_timeout)
                assert (result.exit_code, result.stdout) == (0, b"done\n"), result
            finally:
                for task in (frozen, running, go):
                    if task is None:
                        continue
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task

        conformance.run(scenario(), "a command across a pause")

    @pytest.mark.mango_capability(Capability.PAUSE.value)
    def test_pause_and_resume_are_idempotent(self, conformance: Harness) -> None:
        """Resume of a running sandbox, and a second pause or resume, are no-ops, not errors."""
        sandbox = conformance.create()
        pausable = _pausable(sandbox)
        conformance.run(pausable.resume(), "resume of a running sandbox")
        assert not conformance.run(pausable.is_paused())
        for _ in range(2):
            conformance.run(pausable.pause(), "pause")
        assert conformance.run(pausable.is_paused())
        for _ in range(2):
            conformance.run(pausable.resume(), "resume")
        assert not conformance.run(pausable.is_paused())
        assert conformance.sh(sandbox, "echo up").stdout == b"up\n"

    @pytest.mark.mango_capability(Capability.PAUSE.value)
    def test_a_fresh_provider_sees_the_pause(self, conformance: Harness) -> None:
        """The pause is the backend's: a fresh instance's attach sees it and resumes it by ref."""
        key = conformance.new_key("pause")
        sandbox = conformance.create(key)
        pausable = _pausable(sandbox)
        conformance.run(pausable.pause(), "pause")
        fresh = _provider(conformance)
        attached = _pausable(conformance.attach(key, sandbox.ref, fresh))  # type: ignore[arg-type]
        assert conformance.run(attached.is_paused()), (
            "a sandbox attached through a fresh provider is not paused (attach must not resume)"
        )
        conformance.run(fresh.resume(key, sandbox.ref), "resume by reference")
        assert not conformance.run(pausable.is_paused()), "resume by reference did not resume"
        conformance.run(fresh.pause(key, sandbox.ref), "pause by reference")
        assert conformance.run(pausable.is_paused()), "pause by reference did not pause"
        conformance.run(pausable.resume(), "resume")
        assert conformance.sh(sandbox, "echo up").stdout == b"up\n"


class PortChecks:
    """Capability ``exposed-ports``: a URL through which a server in the sandbox is reached."""

    @pytest.mark.mango_capability(Capability.EXPOSED_PORTS.value)
    def test_exposed_port_reaches_a_server_in_the_sandbox(self, conformance: Harness) -> None:
        """A server in the sandbox answers through expose_port's URL and headers; port 0 is
        refused, and a destroyed sandbox's port is SandboxNotFound."""
        testbed = conformance.testbed()
        ports = testbed.ports if testbed is not None else None
        if ports is None:
            pytest.fail(no_testbed(conformance, Capability.EXPOSED_PORTS, "port testbed"))
        spec = attrs.evolve(conformance.options.spec, network=ports.network)
        sandbox = conformance.create(spec=spec)
        assert isinstance(sandbox, PortSandbox), "the sandbox does not implement PortSandbox"
        token = secrets.token_hex(16)
        conformance.run(sandbox.write_file("index.html", token.encode()))
        with pytest.raises(InvalidInput):
            conformance.run(sandbox.expose_port(0), "expose_port(0)")

        async def scenario() -> None:
            exposed = await sandbox.expose_port(ports.port)
            assert isinstance(exposed, ExposedPort), f"expose_port answered {exposed!r}"
            url = exposed.url
            assert url.startswith(("http://", "https://")), url
            assert "@" not in url.split("//", 1)[1].split("/", 1)[0], "the URL carries a credential"
            for value in exposed.headers.values():
                assert value not in url, "a header's value (a token?) is in the URL"
            server = asyncio.create_task(sandbox.exec(conformance.command(SERVE, str(ports.port))))
            try:
                last: list[str] = []

                async def served() -> bool:
                    assert not server.done(), f"the server ended: {server.result()!r}"
                    try:
                        status, body = await asyncio.to_thread(
                            _fetch, url.rstrip("/") + "/index.html", exposed.headers
                        )
                    # Any failure while the server starts (refused, reset, closed by a
                    # proxy before the server listens) is a reason to ask again.
                    except Exception as exc:  # noqa: BLE001
                        last[:] = [f"{type(exc).__name__}: {exc}"]
                        return False
                    last[:] = [f"status {status}: {body[:80]!r}"]
                    return status == 200 and body == token

                await _until(
                    conformance,
                    served,
                    lambda: f"the server answering through {url} (last: {last})",
                    SERVER_START_SECONDS,
                )
            finally:
                server.cancel()
                with contextlib.suppress(BaseException):
                    await server

        conformance.run(scenario(), "a server through its URL")
        conformance.run(sandbox.destroy(), "destroy")
        with pytest.raises(SandboxNotFound):
            conformance.run(sandbox.expose_port(ports.port), "expose_port after destroy")


def _fetch(url: str, headers: Mapping[str, str]) -> tuple[int, str]:
    """GET ``url`` with ``headers`` (the standard library's client: the suite needs no HTTP
    library)."""
    request = urllib.request.Request(url, headers=dict(headers))  # noqa: S310 - http(s) checked
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - http(s) checked
        return int(answer.status), answer.read(1 << 16).decode("utf-8", "replace")


mark_checks(PauseChecks, pytest.mark.mango_capability_group)
mark_checks(PortChecks, pytest.mark.mango_capability_group)
