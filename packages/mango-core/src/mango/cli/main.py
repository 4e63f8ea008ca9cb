"""``mango``: run commands in a Session's durable sandbox and manage Sessions.

Every command reads its configuration from the environment (see the README's
configuration table). Expected failures print one ``error:`` line and, where
there is one, a ``hint:`` line; never a traceback.

One module per command group: :mod:`~mango.cli.providers`,
:mod:`~mango.cli.execute` (``exec``), :mod:`~mango.cli.files`,
:mod:`~mango.cli.sessions`, :mod:`~mango.cli.reconcile`, :mod:`~mango.cli.gc`,
:mod:`~mango.cli.doctor`, :mod:`~mango.cli.embedded`,
:mod:`~mango.cli.worker`, :mod:`~mango.cli.store`,
:mod:`~mango.cli.resources`, :mod:`~mango.cli.outputs` and
:mod:`~mango.cli.skills`; what they share
is in :mod:`~mango.cli.common`.

Start-up time matters here (an agent may run hundreds of commands): only
click, attrs and mango's own light modules are imported up front. The
database driver, the plugins and Temporal are imported by the commands that
use them, and the embedded PostgreSQL is left running between commands
(``MANGO_EMBEDDED_IDLE_SECONDS``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from mango.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_TIMEOUT,
    Wiring,
    fail,
    reader_gone,
    stdout_reader_gone,
)
from mango.cli.devenv import dev_env
from mango.cli.doctor import doctor
from mango.cli.embedded import embedded
from mango.cli.execute import exec_
from mango.cli.files import files
from mango.cli.gc import gc
from mango.cli.hints import hint_for
from mango.cli.outputs import outputs
from mango.cli.ports import ports
from mango.cli.processes import processes
from mango.cli.providers import providers
from mango.cli.reconcile import reconcile
from mango.cli.resources import resources
from mango.cli.sessions import sessions
from mango.cli.skills import skills
from mango.cli.store import store
from mango.cli.worker import worker
from mango.domain.errors import MangoError

if TYPE_CHECKING:
    from mango.runtime import PortsWrapper

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_TIMEOUT", "cli", "main"]


class _MangoGroup(click.Group):
    """The root group: every expected failure in mango's own two lines, never a traceback.

    click's usage errors (an unknown option, a bad value) are ``error:`` and
    ``hint:`` lines too, not click's ``Usage: ... Error: ...`` block; Ctrl-C
    outside a command's event loop is ``error: interrupted`` (130), not
    click's ``Aborted!`` (1); a reader that went away (``... | head``) ends
    the command quietly (141), as a Unix tool does.
    """

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            path = exc.ctx.command_path if exc.ctx is not None else "mango"
            fail(_sentence(exc.format_message()), f"see '{path} --help'", exc.exit_code)
        except click.ClickException as exc:
            fail(_sentence(exc.format_message()), code=exc.exit_code)
        except click.Abort:
            fail("interrupted", code=EXIT_INTERRUPTED)
        # Not standalone, click returns what --help and --version exit with.
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MangoError as exc:
            fail(str(exc), hint_for(exc))
        except KeyboardInterrupt:
            fail("interrupted", code=EXIT_INTERRUPTED)
        except BrokenPipeError:
            if not stdout_reader_gone():
                raise
            reader_gone()


def _sentence(message: str) -> str:
    """click's message as one of mango's: one line, no capital, no full stop."""
    text = " ".join(line.strip() for line in message.splitlines() if line.strip())
    if text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    return text.removesuffix(".")


@click.group(cls=_MangoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-v", "--verbose", is_flag=True, help="Log progress, and the libraries' own logs, to stderr."
)
@click.version_option(package_name="mango-core", prog_name="mango")
def cli(verbose: bool) -> None:
    """mango: one durable sandbox per AI-agent Session, on any backend.

    The provider is chosen by MANGO_SANDBOX (default: local). With no
    MANGO_DATABASE_URL, a private PostgreSQL is started under the state
    directory (MANGO_STATE_DIR).
    """
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        # mango's own warnings only (a retry's one line: what, why, attempt n of m), never a
        # library's (stamina's "retry_scheduled", httpx's requests): those take -v.
        handler.addFilter(_mango_only)
        handler.setFormatter(logging.Formatter("mango: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


def _mango_only(record: logging.LogRecord) -> bool:
    return record.name == "mango" or record.name.startswith("mango.")


for _command in (
    providers,
    exec_,
    files,
    processes,
    sessions,
    reconcile,
    gc,
    doctor,
    embedded,
    worker,
    store,
    dev_env,
    resources,
    outputs,
    ports,
    skills,
):
    cli.add_command(_command)


def main(*, wrap_ports: PortsWrapper | None = None) -> None:
    """Entry point of the ``mango`` script.

    ``wrap_ports`` is a seam for tests (the crash-recovery tests' own entry
    point passes crash injection through it); the script passes nothing.

    After a command that used Temporal the process ends with ``os._exit``
    once its output is flushed: the SDK's Rust threads can otherwise abort
    the interpreter's teardown (SIGABRT, "PyGILState_Release ... finalizing";
    temporalio/sdk-python#300), turning a finished command into exit -6.
    Everything the command opened is already closed by then.
    """
    try:
        cli(prog_name="mango", obj=Wiring(wrap_ports))
    except SystemExit as exit_:
        code = exit_.code
    else:  # pragma: no cover - click's standalone mode always exits
        code = 0
    if "temporalio" not in sys.modules:
        raise SystemExit(code)
    if isinstance(code, str):
        print(code, file=sys.stderr)  # what SystemExit does with a message
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code if isinstance(code, int) else 0)
