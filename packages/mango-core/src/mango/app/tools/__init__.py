"""Built-in agent tools, run through the :class:`~mango.domain.ports.Sandbox` port.

A tool call is a name and a JSON object of arguments, as a model emits it.
The arguments are checked strictly at this boundary (unknown fields, wrong
types and bad values are :class:`~mango.domain.errors.InvalidInput` listing
every problem; :mod:`~mango.app.tools.arguments`) before anything runs.

========  ============================================================  ===========================
tool      arguments                                                     runs in the sandbox
========  ============================================================  ===========================
``bash``  ``command``, ``timeout``?, ``cwd``?, ``env``?, ``stdin``?     ``/bin/sh -c command``
``read``  ``path``, ``offset``? (first line, 1-based), ``limit``?       ``Sandbox.open_file``
``write`` ``path``, ``content``                                         ``Sandbox.write_file``
``edit``  ``path``, ``old_string``, ``new_string``                      bounded read, replace, write
``glob``  ``pattern`` (``*``, ``?``, ``[..]``, ``{a,b}``, ``**/``),     ``list_dir`` (file API),
          ``path``?                                                     else ``find``
``grep``  ``pattern`` (extended regex), ``path``?, ``include``?,        ``find ... -exec grep``
          ``ignore_case``?, ``fixed_strings``?
========  ============================================================  ===========================

So a sandbox image needs only a POSIX ``/bin/sh``, ``find`` and ``grep``
(``glob`` and ``grep`` pass their patterns as argv items, never through a
shell). Where the provider declares ``file-api``, ``glob`` lists through it
instead (one bounded recursive ``list_dir`` of at most
:data:`~mango.app.tools.runner.GLOB_SCAN_LIMIT` entries, links listed but never
followed, no ``find``); ``grep`` stays ``find ... -exec grep``, since the
matching has to run where the files are. Every result is capped: each output
stream and the rendered text at ``max_output_bytes``, listings at
``max_results`` entries, with the ``truncated`` flag set. ``read`` streams the
file and keeps only its window (:mod:`~mango.app.tools.lines`): it never holds
more than the output cap and never reads more than ``max_read_bytes`` of the
file. ``edit`` reads files of at most ``max_read_bytes`` (:class:`ToolFailed`
beyond), replaces exactly one occurrence and fails with :class:`ToolFailed` when
``old_string`` occurs zero times or more than once (overlapping occurrences
count).

This is the application layer: stdlib, attrs and :mod:`mango.domain` only.
The Temporal adapter carries calls and results across its boundary
(:mod:`mango.temporal.messages`) and runs them in its activities.
"""

from mango.app.tools.arguments import (
    TOOL_NAMES,
    BashArgs,
    EditArgs,
    GlobArgs,
    GrepArgs,
    ReadArgs,
    ToolCall,
    WriteArgs,
    parse_arguments,
)
from mango.app.tools.globs import glob_to_regex
from mango.app.tools.lines import BINARY_SNIFF_BYTES, LineWindow, read_line_window
from mango.app.tools.runner import (
    DEFAULT_MAX_RESULTS,
    DEFAULT_MAX_TOOL_OUTPUT_BYTES,
    ToolResult,
    ToolRunner,
)
from mango.domain.errors import ToolFailed

__all__ = [
    "BINARY_SNIFF_BYTES",
    "DEFAULT_MAX_RESULTS",
    "DEFAULT_MAX_TOOL_OUTPUT_BYTES",
    "TOOL_NAMES",
    "BashArgs",
    "EditArgs",
    "GlobArgs",
    "GrepArgs",
    "LineWindow",
    "ReadArgs",
    "ToolCall",
    "ToolFailed",
    "ToolResult",
    "ToolRunner",
    "WriteArgs",
    "glob_to_regex",
    "parse_arguments",
    "read_line_window",
]
