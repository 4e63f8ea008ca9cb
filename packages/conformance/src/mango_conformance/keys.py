"""Session keys for checks: fresh, short, lowercase, and never reused across runs.

A key looks like ``sc-<run>-<n>``: ``<run>`` is random per process (so a live
provider never re-adopts a resource an earlier run left behind) and ``<n>``
counts up. Keys use only ``[a-z0-9-]`` and stay within 48 characters, which
every known backend accepts as (part of) a label or a DNS name.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time

__all__ = ["KEY_PREFIX", "MAX_KEY_LENGTH", "new_session_key", "run_id"]

KEY_PREFIX = "sc"
MAX_KEY_LENGTH = 48

_RUN_ID = f"{int(time.time()) % 16**4:04x}{secrets.token_hex(3)}"
_counter = itertools.count(1)
_lock = threading.Lock()


def run_id() -> str:
    """The random id of this process's run; every key starts with ``sc-<run_id>-``."""
    return _RUN_ID


def new_session_key(tag: str = "") -> str:
    """A Session key no earlier call (in any run) returned; ``tag`` is ``[a-z0-9]`` only."""
    with _lock:
        number = next(_counter)
    clean = "".join(char for char in tag.lower() if char.isascii() and char.isalnum())[:12]
    return f"{KEY_PREFIX}-{_RUN_ID}-{clean}{number}"
