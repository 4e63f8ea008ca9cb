"""write_stream outside the providers: SessionManager's client, the fallback, the multipart body."""

from __future__ import annotations

import email.parser
import email.policy
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mango.app import InMemoryBindingStore, SandboxWrapper, SessionManager
from mango.domain import InvalidInput, LifecycleState, SandboxNotFound, SandboxSpec
from mango.local import LocalProvider
from mango.provider.multipart import FormField, multipart_body


async def _chunks(*parts: Any) -> AsyncIterator[Any]:
    for part in parts:
        yield part


async def test_the_session_client_streams_and_records_a_loss(tmp_path: Path) -> None:
    """Through SessionManager's client the write streams in; a vanished sandbox is lost."""
    manager = SessionManager(LocalProvider(tmp_path / "sandboxes"), InMemoryBindingStore())
    await manager.ensure_session("s1")
    sandbox = await manager.acquire("s1", SandboxSpec())
    await sandbox.write_stream("d/f.bin", _chunks(b"ab", bytearray(b"cd")))
    assert await sandbox.read_file("d/f.bin") == b"abcd"
    shutil.rmtree(Path(sandbox.root).parent)
    with pytest.raises(SandboxNotFound):
        await sandbox.write_stream("d/f.bin", _chunks(b"x"))
    assert await manager.observe("s1") is LifecycleState.LOST


async def test_a_sandbox_from_before_write_stream_gets_a_buffered_write(
    world: Any, make_provider: Any
) -> None:
    """A plugin's sandbox without write_stream still works: the chunks go through write_file."""
    old = await make_provider().create("k", SandboxSpec())  # the in-memory test provider's
    assert not hasattr(old, "write_stream")
    wrapped = SandboxWrapper(old)
    await wrapped.write_stream("a.txt", _chunks(b"one ", memoryview(b"two")))
    files = world.files[old.ref.external_id]
    assert files["a.txt"] == b"one two"
    with pytest.raises(InvalidInput):
        await wrapped.write_stream("b.txt", _chunks(b"fine", 5))
    assert "b.txt" not in files, "a refused chunk must write nothing"


async def test_a_multipart_body_parses_as_the_form_it_describes() -> None:
    """An independent parser (the stdlib's) reads back every part, the file's bytes exact."""
    payload = [b"\r\n--not-the-boundary\r\n", bytes(range(256)) * 64, b"\r\n"]
    form = multipart_body(
        (
            FormField("files[0].path", b"/home/x/a b.bin"),
            FormField("metadata", b'{"mode": 644}', "metadata", "application/json"),
        ),
        file_field="files[0].file",
        filename='we"ird\nname.bin',
        chunks=_chunks(*payload),
    )
    body = b"".join([chunk async for chunk in form.chunks])
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {form.content_type}\r\n\r\n".encode() + body
    )
    parts = list(message.iter_parts())
    names = [part.get_param("name", header="content-disposition") for part in parts]
    assert names == ["files[0].path", "metadata", "files[0].file"]
    assert parts[0].get_payload(decode=True) == b"/home/x/a b.bin"
    assert parts[1].get_content_type() == "application/json"
    assert parts[2].get_filename() == "we%22ird%0Aname.bin"
    assert parts[2].get_payload(decode=True) == b"".join(payload)
