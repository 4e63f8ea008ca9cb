"""SessionManager.expose_port: what a provider's sandbox answers reaches the caller as a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from mango.app import InMemoryBindingStore, SandboxWrapper, SessionManager
from mango.domain import CapabilityNotSupported, Command, InvalidInput, SandboxSpec
from mango.domain.capabilities import Capability, CapabilitySet
from mango.domain.errors import ProtocolError
from mango.domain.sandbox_ports import ExposedPort
from mango.local import LocalProvider

SPEC = SandboxSpec()


@attrs.define
class _Answering(SandboxWrapper):
    answer: object = None

    async def expose_port(self, port: int) -> object:
        return self.answer(port) if callable(self.answer) else self.answer


@attrs.define
class _PortProvider:
    """The local provider, declaring exposed-ports, whose sandboxes answer ``answer``."""

    inner: LocalProvider
    answer: object

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> CapabilitySet:
        return CapabilitySet(self.inner.capabilities.items | {Capability.EXPOSED_PORTS})

    async def create(self, session_key: str, spec: SandboxSpec) -> Any:
        return _Answering(await self.inner.create(session_key, spec), self.answer)

    async def attach(self, session_key: str, ref: Any, spec: SandboxSpec) -> Any:
        return _Answering(await self.inner.attach(session_key, ref, spec), self.answer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def _manager(tmp_path: Path, answer: object) -> SessionManager:
    manager = SessionManager(_PortProvider(LocalProvider(tmp_path), answer), InMemoryBindingStore())
    await manager.ensure_session("s1")
    await (await manager.acquire("s1", SPEC)).exec(Command(("true",)))
    return manager


async def test_an_exposed_port_comes_back_as_it_was_answered(tmp_path: Path) -> None:
    """An ExposedPort passes through, headers and all; ports outside 1..65535 never get there."""
    given = ExposedPort("https://8080-x.example", {"X-Token": "t"})
    manager = await _manager(tmp_path, given)
    assert await manager.expose_port("s1", 8080) == given
    for port in (0, 65536, True):
        with pytest.raises(InvalidInput):
            await manager.expose_port("s1", port)  # type: ignore[arg-type]


async def test_a_bare_url_of_an_older_plugin_still_works(tmp_path: Path) -> None:
    """A plugin written before ExposedPort answers a string: it becomes one without headers."""
    manager = await _manager(tmp_path, lambda port: f"http://127.0.0.1:{port}")
    assert await manager.expose_port("s1", 9000) == ExposedPort("http://127.0.0.1:9000")


@pytest.mark.parametrize("answer", ["http://user:secret@host:1", 8080, None])
async def test_an_answer_that_is_no_url_is_a_protocol_error(tmp_path: Path, answer: object) -> None:
    """A URL with a credential in it, or something that is no URL at all: ProtocolError."""
    manager = await _manager(tmp_path, answer)
    with pytest.raises(ProtocolError) as caught:
        await manager.expose_port("s1", 8080)
    assert "secret" not in str(caught.value)


async def test_a_session_without_a_sandbox_is_invalid_input(tmp_path: Path) -> None:
    """expose_port never provisions: a Session with no sandbox is refused."""
    manager = SessionManager(
        _PortProvider(LocalProvider(tmp_path), ExposedPort("http://h:1")), InMemoryBindingStore()
    )
    await manager.ensure_session("s2")
    with pytest.raises(InvalidInput, match="no sandbox"):
        await manager.expose_port("s2", 8080)


async def test_undeclared_is_refused(tmp_path: Path) -> None:
    """The local provider does not declare exposed-ports."""
    manager = SessionManager(LocalProvider(tmp_path), InMemoryBindingStore())
    with pytest.raises(CapabilityNotSupported):
        await manager.expose_port("s1", 8080)
