"""Glob patterns for workspace-relative paths, as the ``glob`` tool matches them."""

from __future__ import annotations

import re

from mango.domain.errors import InvalidInput

__all__ = ["glob_to_regex"]


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end + 1
        elif pattern[i] == "{" and (end := pattern.find("}", i)) != -1:
            options = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(option) for option in options) + ")")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob for relative paths: ``*`` and ``?`` stay within one component,
    ``**/`` spans any number of directories, ``[...]`` and ``{a,b}`` as in shells.
    """
    try:
        return re.compile(_translate(pattern) + r"\Z")
    except re.error as exc:
        raise InvalidInput(f"invalid glob pattern {pattern!r}: {exc}") from exc
