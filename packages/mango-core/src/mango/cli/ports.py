"""``mango ports``: reach a server listening in a Session's sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mango.cli.common import load_settings, session_id_arg, with_runtime
from mango.cli.environment import environment_options, resolve_environment

if TYPE_CHECKING:
    from mango.runtime import Runtime

__all__ = ["ports"]


@click.group()
def ports() -> None:
    """Expose ports of a Session's sandbox."""


@ports.command(name="expose")
@click.option("--session", "session_id", required=True, help="Session id (with a sandbox).")
@environment_options
@click.argument("port", type=click.IntRange(1, 65535))
def ports_expose(  # noqa: PLR0917 - click passes every option as an argument
    session_id: str,
    profile: str | None,
    packages: tuple[str, ...],
    network: str | None,
    allow_hosts: tuple[str, ...],
    port: int,
) -> None:
    """Print a URL that reaches PORT in the Session's sandbox (resumed if paused).

    Give the environment options the Session was made with (as to mango exec).
    Docker publishes on 127.0.0.1 only, the ports of MANGO_SANDBOX_PORTS in a
    sandbox with --network bridge. Refused where the provider does not declare
    exposed-ports; never creates a sandbox.

    \b
    Example:
      mango exec --session web --network bridge -- sh -c 'echo hi > index.html'
      mango ports expose --session web --network bridge 8080
    """
    sid = session_id_arg(session_id)
    spec = resolve_environment(load_settings(), profile, packages, network, allow_hosts)

    async def run(rt: Runtime) -> str:
        return await rt.manager.expose_port(sid, port, spec)

    click.echo(with_runtime(run))
