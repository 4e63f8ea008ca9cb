"""How an embedded PostgreSQL cluster comes to exist, once, on disk.

:class:`Cluster` names the files beside a data directory ``D`` (``D.lock``,
``D.holders``, ``D.credentials.json``, ``D/server.log``), finds the binaries
and the account to run them as (checked reachable, the state directory
created), and :meth:`Cluster.ensure` initialises ``D`` if it is empty:
``initdb`` runs in a staging directory renamed into place, so a crash never
leaves half a cluster. An existing cluster is checked instead (its major
version, its owner, its credentials). Its caller holds the start lock.
Starting and stopping the server is :mod:`mango.embedded._process`'s job.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from pathlib import Path

import attrs

from mango.domain.errors import ConfigurationError, ProviderUnavailable
from mango.embedded._cluster import (
    FALLBACK_HINT,
    HOST,
    SUPERUSER,
    Credentials,
    find_binaries,
    run_tool,
    server_major,
    stage_binaries,
    tail,
    write_credentials,
)
from mango.embedded._host import (
    RUN_AS_ENV,
    Account,
    find_unreachable,
    free_port,
    run_as_account,
)

__all__ = ["Cluster"]

_CONF = """
# Added by mango: a private server, reachable from this machine only.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
"""
_LOG = logging.getLogger("mango.embedded.postgres")


@attrs.frozen
class Cluster:
    """The cluster of one data directory: its files, its tools, its creation."""

    data_dir: Path
    """The cluster directory (absolute)."""
    timeout: float
    """Seconds allowed for a tool (``initdb`` gets at least two minutes)."""

    def sibling(self, suffix: str, *, hidden: bool = False) -> Path:
        """``D<suffix>`` (``.D<suffix>`` if ``hidden``) beside the data directory."""
        dot = "." if hidden else ""
        return self.data_dir.with_name(f"{dot}{self.data_dir.name}{suffix}")

    @property
    def credentials_path(self) -> Path:
        """``D.credentials.json``: the port and the password, mode 0600."""
        return self.sibling(".credentials.json")

    @property
    def log_path(self) -> Path:
        """The server log, worth reading when a start fails."""
        return self.data_dir / "server.log"

    def tools(self, *, prepare: bool) -> tuple[Path, Account | None]:
        """The binaries to run and the account to run them as (checked reachable).

        With ``prepare`` the state directory is created (and checked again
        once it exists).
        """
        bin_dir = find_binaries()
        account = run_as_account(self.data_dir)
        if account is not None and find_unreachable(account, bin_dir) is not None:
            # The server account cannot reach the virtual environment: run a
            # world-readable copy kept beside the data directory instead.
            if prepare:
                self._prepare_parent(account)
            bin_dir = stage_binaries(bin_dir, self.data_dir.parent / ".pginstall")
        if prepare:
            self._prepare_parent(account, bin_dir)
        return bin_dir, account

    def ensure(
        self, bin_dir: Path, account: Account | None, credentials: Credentials | None
    ) -> Credentials:
        """The credentials of the cluster, initialising it first if ``D`` is empty."""
        version_file = self.data_dir / "PG_VERSION"
        try:
            initialised = version_file.exists()
            empty = not self.data_dir.exists() or not any(self.data_dir.iterdir())
            cluster_major = version_file.read_text().strip() if initialised else ""
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the PostgreSQL data directory {self.data_dir}: {exc.strerror}",
                hint=f"run mango as the directory's owner, {FALLBACK_HINT}",
            ) from exc
        if initialised:
            expected_major = server_major()
            if cluster_major != expected_major:
                raise ConfigurationError(
                    f"{self.data_dir} holds a PostgreSQL {cluster_major} cluster, but the "
                    f"embedded server is PostgreSQL {expected_major}",
                    hint="upgrade it with pg_upgrade, or move it away to start afresh",
                )
            self._check_owner(account)
            if credentials is None:
                raise self.lost_credentials()
            return credentials
        if not empty:
            raise ConfigurationError(
                f"{self.data_dir} exists but is not a PostgreSQL data directory",
                hint="empty it or choose another directory (MANGO_STATE_DIR)",
            )
        if credentials is None:
            credentials = Credentials(port=free_port(HOST), password=secrets.token_urlsafe(24))
            write_credentials(self.credentials_path, credentials)
        self._initdb(bin_dir, account, credentials)
        return credentials

    def lost_credentials(self) -> ConfigurationError:
        """The error for a cluster whose password file is gone."""
        return ConfigurationError(
            f"{self.credentials_path} is missing, so the password of the "
            f"existing cluster {self.data_dir} is unknown",
            hint="restore the file, or move the data directory away to start afresh",
        )

    def _prepare_parent(self, account: Account | None, *reach: Path) -> None:
        parent = self.data_dir.parent
        existed = parent.exists()
        if account is not None:
            self._check_reachable(account, parent)  # before creating anything
        try:
            parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if account is not None and not existed:
                parent.chmod(0o711)  # our own directory: the server account may pass, not list
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the PostgreSQL state directory {parent}: {exc.strerror}",
                hint=f"set MANGO_STATE_DIR to a writable directory, {FALLBACK_HINT}",
            ) from exc
        if account is not None:
            self._check_reachable(account, parent, *reach)  # what mkdir created, under umask

    @staticmethod
    def _check_reachable(account: Account, *targets: Path) -> None:
        for target in targets:
            blocked = find_unreachable(account, target)
            if blocked is not None:
                raise ConfigurationError(
                    "PostgreSQL refuses to run as root, so mango runs it as "
                    f"{account.name!r}, but {blocked} is not searchable by that account "
                    f"(needed to reach {target})",
                    hint=(
                        f"run mango as a non-root user, allow traversal with "
                        f"'chmod o+x {blocked}', set MANGO_STATE_DIR outside it, "
                        f"set {RUN_AS_ENV} to an account that can reach it, {FALLBACK_HINT}"
                    ),
                )

    def _check_owner(self, account: Account | None) -> None:
        owner = self.data_dir.stat().st_uid
        expected = os.geteuid() if account is None else account.uid
        if owner != expected:
            raise ConfigurationError(
                f"{self.data_dir} is owned by uid {owner}, "
                f"but PostgreSQL would run as uid {expected}",
                hint=f"run mango as uid {owner} (or set {RUN_AS_ENV} when running as root)",
            )

    def _initdb(self, bin_dir: Path, account: Account | None, credentials: Credentials) -> None:
        staging = self.sibling(".initdb", hidden=True)
        pwfile = self.sibling(".pwfile", hidden=True)
        shutil.rmtree(staging, ignore_errors=True)  # what a crashed initdb left
        staging.mkdir(mode=0o700)
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(credentials.password + "\n")
        try:
            if account is not None:
                os.chown(staging, account.uid, account.gid)
                os.chown(pwfile, account.uid, account.gid)
            _LOG.info("initialising a PostgreSQL cluster in %s", self.data_dir)
            argv = [
                str(bin_dir / "initdb"),
                f"--pgdata={staging}",
                f"--username={SUPERUSER}",
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-locale",
                "--no-instructions",
            ]
            code, output = run_tool(argv, account, timeout=max(self.timeout, 120.0))
            if code != 0:
                raise ProviderUnavailable(
                    f"initdb failed for {self.data_dir} (exit {code}): {tail(output)}",
                    hint=f"fix the cause, {FALLBACK_HINT}",
                )
            with (staging / "postgresql.conf").open("a", encoding="utf-8") as conf:
                conf.write(_CONF)
            if self.data_dir.exists():
                self.data_dir.rmdir()  # empty, checked by the caller under the lock
            staging.rename(self.data_dir)
        finally:
            pwfile.unlink(missing_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
