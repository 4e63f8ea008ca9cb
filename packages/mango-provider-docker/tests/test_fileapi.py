"""The file API in a Docker sandbox (the kit's exec fallback): odd names, kinds.

The rules themselves are the conformance group's (``test_conformance.py``).
"""

from __future__ import annotations

import pytest

from mango.domain.sandbox_ports import FileKind, FileSystemSandbox
from mango_provider_docker import DockerSandbox

from .helpers import sh

pytestmark = pytest.mark.docker


def test_the_sandbox_implements_the_protocol() -> None:
    """A Docker sandbox class is a FileSystemSandbox (what file-api promises)."""
    assert issubclass(DockerSandbox, FileSystemSandbox)


async def test_names_that_look_like_shell_syntax_are_only_names(sandbox: DockerSandbox) -> None:
    """Quotes, ``$( )``, globs, spaces and leading dashes travel as argv, never as syntax."""
    names = ["-rf", "a b", "it's", "$(touch pwned)", "*", "x;y", "--", "ü"]
    for name in names:
        await sandbox.make_dir(f"odd/{name}", parents=True)
        await sandbox.rename(f"odd/{name}", f"odd/{name}.moved")
    listing = await sandbox.list_dir("odd")
    assert [entry.name for entry in listing.entries] == sorted(f"{name}.moved" for name in names)
    assert all(entry.kind is FileKind.DIRECTORY for entry in listing.entries)
    await sandbox.remove(f"odd/{names[0]}.moved")
    assert len((await sandbox.list_dir("odd")).entries) == len(names) - 1
    assert not await sandbox.exists("pwned")


async def test_kinds_and_names_the_api_cannot_address(sandbox: DockerSandbox) -> None:
    """A FIFO is OTHER; a name with a tab is listed; one with a newline is left out."""
    made = await sandbox.exec(
        sh('mkdir -p k && mkfifo k/pipe && mkdir "$1" "$2"', "k/new\nline", "k/ta\tb")
    )
    assert made.exit_code == 0, made.stderr
    listing = await sandbox.list_dir("k", recursive=True)
    assert [(entry.path, entry.kind) for entry in listing.entries] == [
        ("k/pipe", FileKind.OTHER),
        ("k/ta\tb", FileKind.DIRECTORY),
    ]
    root = await sandbox.stat("")
    assert (root.path, root.kind) == ("", FileKind.DIRECTORY)
