"""Rows read by column name through the one converter, and the spec written the same way.

Each query names its columns after the fields of the value it yields
(``id AS session_id``, ``... AS deleting``; a binding's reference is one JSON
column, ``ref``), and each row, a mapping from column name to value, is
structured by :data:`mango.app.converter.converter`: attrs validators run, and
a row the value cannot hold (a column it does not have, a wrong-typed value, a
stored spec with an unknown field, as a newer release could write) is one
:class:`~mango.domain.errors.InvalidInput` naming every field at fault. The
spec is written as the converter's canonical document, the same one its hash
is computed from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from mango.app.converter import converter, structure
from mango.domain.values import Binding, ProvisioningIntent, SandboxSpec, SessionRecord

__all__ = [
    "fetch_all",
    "fetch_one",
    "spec_document",
]

_T = TypeVar("_T", SessionRecord, ProvisioningIntent, Binding)

_NAMES: dict[type[Any], str] = {
    SessionRecord: "Session row",
    ProvisioningIntent: "provisioning intent",
    Binding: "sandbox binding",
}


def spec_document(spec: SandboxSpec) -> Jsonb:
    """The spec as stored with an intent: its canonical document, as JSONB."""
    return Jsonb(converter.unstructure(spec))


def _read(row: dict[str, Any], type_: type[_T]) -> _T:
    session = row.get("session_id")
    return structure(
        row,
        type_,
        what=f"the stored {_NAMES[type_]} of session {session!r}",
        path="row",
        hint="mango writes these rows: a newer release may have written this one "
        "(upgrade this one), or it was edited by hand",
    )


async def fetch_one(
    conn: psycopg.AsyncConnection[Any],
    query: LiteralString,
    params: Sequence[Any],
    type_: type[_T],
) -> _T | None:
    """Run ``query`` and read its one row (or None) as ``type_``."""
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(query, params)
        row = await cursor.fetchone()
    return None if row is None else _read(row, type_)


async def fetch_all(
    conn: psycopg.AsyncConnection[Any],
    query: LiteralString,
    params: Sequence[Any],
    type_: type[_T],
) -> list[_T]:
    """Run ``query`` and read every row as ``type_``."""
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(query, params)
        rows = await cursor.fetchall()
    return [_read(row, type_) for row in rows]
