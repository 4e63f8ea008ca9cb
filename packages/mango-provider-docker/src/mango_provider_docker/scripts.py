"""The two POSIX ``sh`` scripts the provider runs inside containers.

Both take their inputs as positional parameters (``sh -c SCRIPT NAME ARG...``),
never by interpolation, and use only shell builtins on their common path
(``cd``, ``test``, ``printf``, ``read``, ``kill``), so any image with a POSIX
``/bin/sh`` works: busybox, dash, bash.

:data:`EXEC_WRAPPER` runs every command. It enters the working directory below
``/workspace`` one component at a time (creating missing directories and
refusing symlinks), prints one status line on stdout, then ``exec``\\ s the
command, which keeps the wrapper's pid. A program that cannot be run is
reported as the local provider reports it (``mango: NAME: command not found``
and 127, ``mango: PATH: No such file or directory`` and 127, ``mango: PATH:
Permission denied`` and 126), not with the shell's own message, which would
name this wrapper's line numbers. Its own variables are prefixed ``_mango_``
and unset before the ``exec``, so they never shadow the command's
environment. The status line is the first thing on
stdout, before the command can print anything:

* ``mango-exec:<pid>`` -- the command's pid inside the container is ``<pid>``;
* ``mango-exec-error:<reason>`` and exit status 125 -- the command did not run
  (``root``: ``/workspace`` is missing or a symlink; ``symlink``: a component of
  the working directory is a symlink; ``notdir``: a component is not a
  directory).

:data:`TREE_KILLER` terminates the process tree of one command, given that
pid. Exec processes are session and process-group leaders (runc calls
``setsid`` for them), but the killer does not rely on it: it freezes
(``SIGSTOP``) the root, then repeatedly scans ``/proc`` and freezes every
process whose process group or session is the root's pid or whose parent is
already frozen, until a scan finds nothing new; then it sends ``SIGKILL`` to
the group and to every frozen process. Frozen processes cannot fork or be
re-parented away while the tree is collected. A descendant that called
``setsid`` *and* whose parent exited before the kill has left the tree and is
not found -- the same limit as the local provider's process-group kill.
"""

from __future__ import annotations

from mango.provider.shell import TREE_KILLER

__all__ = ["EXEC_WRAPPER", "STATUS_ERROR", "STATUS_PID", "TREE_KILLER"]

STATUS_PID = b"mango-exec:"
"""Prefix of the wrapper's status line when the command is about to start."""
STATUS_ERROR = b"mango-exec-error:"
"""Prefix of the wrapper's status line when the command could not start."""

EXEC_WRAPPER = r"""_mango_d=$1; shift
if [ -L /workspace ] || ! cd -P /workspace 2>/dev/null; then
    printf 'mango-exec-error:root\n'; exit 125
fi
if [ -n "$_mango_d" ]; then
    IFS=/; set -f
    for _mango_c in $_mango_d; do
        if [ -L "./$_mango_c" ]; then printf 'mango-exec-error:symlink\n'; exit 125; fi
        [ -e "./$_mango_c" ] || mkdir "./$_mango_c" 2>/dev/null
        if ! cd -P "./$_mango_c" 2>/dev/null; then printf 'mango-exec-error:notdir\n'; exit 125; fi
    done
    unset IFS; set +f
fi
unset OLDPWD
printf 'mango-exec:%s\n' "$$"
case $1 in
*/*)
    if [ ! -e "$1" ]; then printf 'mango: %s: No such file or directory\n' "$1" >&2; exit 127; fi
    if [ -d "$1" ] || [ ! -x "$1" ]; then
        printf 'mango: %s: Permission denied\n' "$1" >&2; exit 126
    fi
    ;;
*)
    _mango_f=; set -f; IFS=:
    for _mango_c in $PATH; do
        if [ -f "${_mango_c:-.}/$1" ] && [ -x "${_mango_c:-.}/$1" ]; then _mango_f=1; break; fi
    done
    unset IFS; set +f
    if [ -z "$_mango_f" ]; then printf 'mango: %s: command not found\n' "$1" >&2; exit 127; fi
    ;;
esac
unset _mango_c _mango_d _mango_f
exec "$@"
"""
"""``sh -c EXEC_WRAPPER sh CWD ARGV...``: see the module docstring."""

# The killer is the kit's (shared with every provider that kills through a shell).
