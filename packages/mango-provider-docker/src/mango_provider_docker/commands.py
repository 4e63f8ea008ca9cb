"""What a command becomes before it is sent to the Engine, and what refuses it.

The Engine's exec API is JSON: argv and environment travel as text, within
the runtime's message limit. :func:`check_command_text` refuses what it
cannot carry before anything is sent, :func:`exec_env` is the environment
every command gets, :func:`not_started_error` what a runtime's refusal to
start one means, :func:`wrapper_error` what the wrapper's refusal to run one
(its ``mango-exec-error:`` status line, see :mod:`~mango_provider_docker.scripts`)
means.
"""

from __future__ import annotations

from mango.provider import (
    Command,
    InvalidInput,
    MangoError,
    PathEscapeError,
    PermanentError,
    ProviderUnavailable,
)
from mango_provider_docker.layout import WORKSPACE

__all__ = [
    "MAX_COMMAND_BYTES",
    "SAFE_PATH",
    "SHELL",
    "check_command_text",
    "exec_env",
    "not_started_error",
    "wrapper_error",
]

SHELL = "/bin/sh"
"""The POSIX shell every image must provide; it runs the wrapper and the killer."""
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""``PATH`` of every command unless ``Command.env`` sets one."""
MAX_COMMAND_BYTES = 4 * 1024 * 1024
"""The most argv and environment bytes an exec may carry: more can never start (the runtime's
message limit is 4 MiB, and the kernel's ``ARG_MAX`` is 2 MiB under the usual 8 MiB stack)."""


def exec_env(command: Command) -> list[str]:
    """The environment of an exec: ``PATH`` and ``HOME`` fixed, then ``command.env``."""
    env = {"PATH": SAFE_PATH, "HOME": WORKSPACE, **command.env_dict}
    return [f"{key}={value}" for key, value in env.items()]


def check_command_text(command: Command) -> None:
    """Refuse what the Engine API cannot carry: bytes that are not UTF-8, and sheer size.

    The API is JSON, whose strings are Unicode: the daemon would turn every
    undecodable byte (a surrogate escape from ``os.fsdecode``) into U+FFFD, so
    the command would silently get other bytes than it was given.
    """
    size = 0
    for index, arg in enumerate(command.argv):
        try:
            size += len(arg.encode("utf-8")) + 1
        except UnicodeEncodeError as exc:
            raise InvalidInput(
                f"argument {index} is not valid UTF-8 (undecodable byte at offset {exc.start}); "
                "the Docker Engine API carries text only"
            ) from None
    for key, value in command.env:
        try:
            size += len(key) + len(value.encode("utf-8")) + 2
        except UnicodeEncodeError as exc:
            raise InvalidInput(
                f"environment variable {key} is not valid UTF-8 (undecodable byte at offset "
                f"{exc.start}); the Docker Engine API carries text only"
            ) from None
    if size > MAX_COMMAND_BYTES:
        raise InvalidInput(
            f"the command line and environment are too large to start: {size} bytes, a "
            f"container exec takes at most {MAX_COMMAND_BYTES}"
        )


_TOO_LARGE = ("argument list too long", "exceed maximum message size")


def not_started_error(container_id: str, failure: bytes) -> MangoError:
    """The error for an exec whose wrapper never ran; ``failure`` is what the runtime said.

    A command line or environment too large for the runtime is :class:`InvalidInput`;
    anything else is :class:`ProviderUnavailable`: the command did not start, so
    running it again is safe.
    """
    text = failure.decode("utf-8", "replace").strip() or "no reason given"
    if any(marker in text.lower() for marker in _TOO_LARGE):
        return InvalidInput(
            f"the command line and environment are too large to start in container "
            f"{container_id}: {text}"
        )
    return ProviderUnavailable(
        f"the command could not be started in container {container_id}: {text}"
    )


def wrapper_error(reason: str) -> MangoError:
    """The error for a command the wrapper refused to run; ``reason`` is from its status line."""
    if reason == "symlink":
        return PathEscapeError(
            "the working directory goes through a symlink; symlinks in the workspace are "
            "never followed"
        )
    if reason == "notdir":
        return PermanentError("a component of the working directory is not a directory")
    return PermanentError(f"the container's {WORKSPACE} is missing or is a symlink")
