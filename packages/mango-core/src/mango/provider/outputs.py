"""Session outputs as mango publishes them, for providers and their conformance checks.

A ``session-outputs`` provider hands out the backend's own tar stream of
``/mnt/session/outputs``; mango reads it with :func:`read_outputs`, which
refuses (with :class:`~mango.domain.errors.OutputRejected` naming the
entry) whatever cannot be published: symlinks, hardlinks, devices, FIFOs,
names that are not clean UTF-8 or climb out, more than
:data:`MAX_OUTPUT_FILES` files or one larger than
:data:`MAX_OUTPUT_FILE_BYTES`. A provider's export must therefore keep
every entry's type as it is, never resolving or dropping one.
"""

from __future__ import annotations

from mango.domain.archives import ArchiveEntry, EntryType, TarReader
from mango.domain.outputs import (
    MAX_OUTPUT_FILE_BYTES,
    MAX_OUTPUT_FILES,
    OutputFile,
    output_path,
    read_outputs,
)

__all__ = [
    "MAX_OUTPUT_FILES",
    "MAX_OUTPUT_FILE_BYTES",
    "ArchiveEntry",
    "EntryType",
    "OutputFile",
    "TarReader",
    "output_path",
    "read_outputs",
]
