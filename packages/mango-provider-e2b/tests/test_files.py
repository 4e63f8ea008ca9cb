"""Files through envd, read and written by the kit's RemoteFiles."""

from __future__ import annotations

import pytest

from mango.provider import InvalidInput
from mango_provider_e2b import E2BSandbox
from mango_provider_e2b.fake import E2BFakeService


@pytest.mark.parametrize("data", [5, "text", None])
async def test_a_write_of_anything_but_bytes_is_invalid_input_and_sends_nothing(
    fake: E2BFakeService, sandbox: E2BSandbox, data: object
) -> None:
    """A non-bytes value is refused before any request: no file, no directory appears."""
    before = len(fake.faults.log)
    with pytest.raises(InvalidInput, match="takes bytes"):
        await sandbox.write_file("made/x.bin", data)  # type: ignore[arg-type]
    assert len(fake.faults.log) == before
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("made/x.bin")
