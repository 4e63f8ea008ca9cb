"""``mango skills``: upload a skill (a directory with ``SKILL.md``, or a zip), list them.

A Session pins skill versions when it is created (``mango sessions create ID
--skill NAME@VERSION``); they appear read-only at ``/workspace/skills/<name>/``
before its first tool step. No provider is opened here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mango.cli.common import load_settings, run_async
from mango.cli.output import echo_json, echo_table

if TYPE_CHECKING:
    from mango.app.skills import SessionSkills
    from mango.domain.skills import SkillVersion

__all__ = ["skills"]

T = TypeVar("T")


def _run(body: Callable[[SessionSkills], Awaitable[T]]) -> T:
    """Open the database and the Files store (the embedded PostgreSQL lingers), run ``body``."""
    from mango.filestore import FileStoreSettings

    settings = load_settings()

    async def go() -> T:
        from mango.runtime import open_session_skills

        file_settings = FileStoreSettings.from_env(settings.environ, state=settings.state_dir)
        async with open_session_skills(settings, file_settings, linger=True) as library:
            return await body(library)

    return run_async(go)


def _row(version: SkillVersion) -> dict[str, Any]:
    return {
        "name": version.name,
        "version": version.version,
        "ref": str(version.ref),
        "description": version.description,
        "files": version.file_count,
        "expanded_bytes": version.expanded_size,
        "archive_bytes": version.size,
        "sha256": version.sha256,
        "created_at": version.created_at.isoformat(),
    }


@click.group(name="skills")
def skills() -> None:
    """Custom Skills: verified, read-only trees at /workspace/skills/NAME in a sandbox.

    Pinning needs a provider that declares skill-bundles (docker); others
    refuse at admission.
    """


@skills.command(name="add")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
def skills_add(path: Path) -> None:
    """Upload the skill at PATH (a directory with SKILL.md, or a zip); print NAME@VERSION.

    Its name is SKILL.md's frontmatter 'name:'. Uploading another tree under
    a name adds its next version; the same tree again is the same version.

    \b
    Example:
      mango skills add ./my-skill
      mango sessions create demo --skill my-skill@1
    """

    async def run(library: SessionSkills) -> SkillVersion:
        return await library.add(path)

    click.echo(str(_run(run).ref))


@skills.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def skills_ls(as_json: bool) -> None:
    """List every version of every skill, by name then version."""

    async def run(library: SessionSkills) -> list[dict[str, Any]]:
        return [_row(version) for version in await library.list_versions()]

    rows = _run(run)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["skill", "files", "bytes", "sha256", "description"],
        [
            (r["ref"], r["files"], r["expanded_bytes"], r["sha256"][:12], r["description"])
            for r in rows
        ],
    )
