"""The one place where psycopg's exceptions become mango errors, and URL redaction.

* connection, pool and transient server failures (``OperationalError`` and
  ``InterfaceError``: refused, reset, pool timeout, serialization failure,
  deadlock, statement timeout) -> :class:`ProviderUnavailable` (retry);
* a value PostgreSQL cannot store (``DataError``, e.g. a NUL in JSON text)
  -> :class:`InvalidInput`;
* anything else (a SQL bug) propagates unchanged.

Messages pass through :func:`redact`, so a password never reaches an error.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import psycopg

from mango.domain.errors import InvalidInput, MangoError, ProviderUnavailable

__all__ = ["redact", "redact_conninfo", "translate_errors"]

_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""libpq parameters whose values are secrets (the rest are names, hosts and paths)."""

# scheme://user:PASSWORD@host  and  password=PASSWORD / password='PASS WORD'
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/?#@\s]*:)[^@\s]*@", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE
)


def redact_conninfo(conninfo: str) -> str:
    """Return a libpq connection string or URL in keyword form with every secret masked.

    Parsed by psycopg's own conninfo functions, so every form libpq accepts is
    covered: ``user:password@`` in a URL, ``?password=`` and ``?sslpassword=``
    query parameters, and ``password=...`` keywords (quoted or not).
    """
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<malformed connection string>"
    shown = {
        name: ("***" if name in _SECRET_PARAMETERS else value)
        for name, value in params.items()
        if value is not None
    }
    return psycopg.conninfo.make_conninfo("", **shown)


def redact(text: str) -> str:
    """Return ``text`` with passwords in URLs, conninfo strings and query parameters masked."""
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    return _KEYWORD_PASSWORD.sub(r"\g<head>***", text)


@contextlib.asynccontextmanager
async def translate_errors(action: str) -> AsyncIterator[None]:
    """Translate psycopg exceptions raised in the block; ``action`` names what was being done."""
    try:
        yield
    except MangoError:
        raise
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise ProviderUnavailable(
            f"PostgreSQL is unavailable while {action}: {_describe(exc)}",
            hint="check that the database server is running and reachable, then retry",
        ) from exc
    except psycopg.DataError as exc:
        raise InvalidInput(f"PostgreSQL rejected a value while {action}: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    message = " ".join(str(exc).split()) or type(exc).__name__
    return redact(message)
