"""``mango ports``: reach a server listening in a Session's sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mango.cli.common import load_settings, session_id_arg, with_runtime
from mango.cli.environment import environment_options, resolve_environment

if TYPE_CHECKING:
    from mango.domain.sandbox_ports import ExposedPort
    from mango.runtime import Runtime

__all__ = ["ports"]


@click.group()
def ports() -> None:
    """Expose ports of a Session's sandbox."""


@ports.command(name="expose")
@click.option("--session", "session_id", required=True, help="Session id (with a sandbox).")
@environment_options
@click.option(
    "--show-headers",
    is_flag=True,
    help="Also print the headers a request to the URL needs ('Name: value', one a line); "
    "they may hold a token.",
)
@click.argument("port", type=click.IntRange(1, 65535))
def ports_expose(  # noqa: PLR0917 - click passes every option as an argument
    session_id: str,
    profile: str | None,
    packages: tuple[str, ...],
    network: str | None,
    allow_hosts: tuple[str, ...],
    show_headers: bool,
    port: int,
) -> None:
    """Print a URL that reaches PORT in the Session's sandbox (resumed if paused).

    Give the environment options the Session was made with (as to mango exec).
    Docker publishes on 127.0.0.1 only, the ports of MANGO_SANDBOX_PORTS in a
    sandbox with --network bridge. Remote providers print their endpoint or
    preview URL; where a request to it needs headers (Daytona's preview
    token), their names go to stderr and --show-headers prints them after the
    URL. Refused where the provider does not declare exposed-ports; never
    creates a sandbox.

    \b
    Example:
      mango exec --session web --network bridge -- sh -c 'echo hi > index.html'
      mango ports expose --session web --network bridge 8080
    """
    sid = session_id_arg(session_id)
    spec = resolve_environment(load_settings(), profile, packages, network, allow_hosts)

    async def run(rt: Runtime) -> ExposedPort:
        return await rt.manager.expose_port(sid, port, spec)

    exposed = with_runtime(run)
    click.echo(exposed.url)
    if show_headers:
        for name, value in exposed.headers.items():
            click.echo(f"{name}: {value}")
    elif exposed.headers:
        names = ", ".join(sorted(exposed.headers))
        click.echo(
            f"a request to this URL needs the header(s) {names} (not shown: they may hold "
            "a token; --show-headers prints them)",
            err=True,
        )
