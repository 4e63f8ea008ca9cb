"""The local provider: each Session's sandbox is a directory on the worker host.

.. warning::

   The local provider is **NOT an isolation boundary**. Commands run as
   ordinary host processes of the worker's user: they share the host kernel,
   filesystem and network, and can read or change anything that user can.
   Use it for development and tests only, never for untrusted code.

It declares two capabilities: ``file-api`` (list, stat, remove, rename, make a
directory: :mod:`mango.local.fileapi`) and ``background-processes``
(:mod:`mango.local.processes`: a small supervisor per process, its log and
state under the provider's own records, so another worker lists, reads and
kills it); package setup, limited network and resource mounts (file
resources, session outputs, skills, memory stores) are rejected at
admission, before anything is provisioned.

What it does guarantee is the core sandbox contract, so the rest of mango can
be developed and tested against it:

* one durable directory per Session key, ``<base>/session-<hash>/`` with the
  workspace in ``workspace/`` and an ownership marker (``owner.json``: the
  sha256 of the key and the provider name, never the key) beside it;
  create is idempotent and attach verifies ownership;
* exec of an argv vector (no shell) in its own process group with a cleared
  environment, a timeout, cancellation that kills the whole group, and
  output capped per stream with memory bounded by the cap;
* file reads and writes confined to the workspace: ``..``, absolute paths and
  symlinks anywhere in the path are refused, never followed;
* the file API by the same rules, race-free: every operation walks to its
  target's parent with ``openat``/``O_NOFOLLOW`` and never follows the target;
  listings are read lazily and bounded;
* idempotent destroy that also kills the sandbox's running commands and
  background processes, whichever process started them.

Select it with ``MANGO_SANDBOX=local``; settings are in :mod:`mango.local.settings`.
"""

from mango.local.provider import DEFAULT_MAX_OUTPUT_BYTES, LocalProvider
from mango.local.sandbox import LocalSandbox
from mango.local.settings import LocalSettings, open_local_provider, read_local_settings

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "LocalProvider",
    "LocalSandbox",
    "LocalSettings",
    "open_local_provider",
    "read_local_settings",
]
