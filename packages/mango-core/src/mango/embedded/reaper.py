"""``python -m mango.embedded.reaper DATA_DIR IDLE TIMEOUT``: the reaper process.

See :mod:`mango.embedded._reaper` for what it does and how it is started.
It is a module of its own, imported by nothing in the package, so that ``-m``
does not run a module the package has already imported. The database driver
is imported once the reaper holds its lock: a second reaper exits before.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import time
from pathlib import Path

from mango.embedded._reaper import reaper_path

__all__ = ["main"]

_LOG = logging.getLogger("mango.embedded._reaper")


def main(argv: list[str] | None = None) -> int:
    """``python -m mango.embedded.reaper DATA_DIR IDLE_SECONDS TIMEOUT``."""
    data_dir_text, idle_text, timeout_text = argv if argv is not None else sys.argv[1:]
    data_dir, idle, timeout = Path(data_dir_text), float(idle_text), float(timeout_text)
    try:
        fd = os.open(reaper_path(data_dir), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return 0  # the state directory is gone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another reaper watches this server
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    # In place: closing our end of the starter's pipe lets ensure_reaper() return.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s reaper %(process)d: %(message)s")

    from mango.domain.errors import MangoError
    from mango.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(data_dir, timeout=timeout, idle_seconds=idle)
    while True:
        try:
            wait = server.stop_if_idle()
        except MangoError as exc:
            _LOG.warning("%s; trying again in %g s", exc, idle)
            wait = idle
        if wait is None:
            return 0
        time.sleep(wait)


if __name__ == "__main__":
    sys.exit(main())
