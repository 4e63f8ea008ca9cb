"""The lifecycle state machine: a Hypothesis ``RuleBasedStateMachine`` over one provider.

The model holds Sessions (key, ref, liveness, the files the machine wrote and
the handles it holds) and clients (providers entered from the target; a new
one is a simulated worker restart). Rules create, re-create, attach, write,
read, exec, try escapes, cancel, attach with foreign keys or provider names,
destroy, destroy again, attach after destroy, and probe isolation; each
checks the provider against the model. Invariants touch only the model, so
they cost nothing at the provider.

The provider is injected by subclassing (Hypothesis rules cannot take pytest
fixtures): :meth:`LifecycleMachine.bind` returns a subclass bound to a
target, and the suite runs it with ``run_state_machine_as_test``. Each machine
instance (one Hypothesis example) drives the async ports through its own
event loop (:class:`~mango_conformance.bridge.AsyncBridge`), closed in
:meth:`~LifecycleMachine.teardown`; teardown never raises and writes whatever
it cannot clean up to the leak ledger.
"""


# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import asyncio
import posixpath

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from mango.provider import (
    OwnershipError,
    PathEscapeError,
    SandboxNotFound,
    SandboxRef,
    is_permanent,
)
from mango_conformance.machine_base import MachineBase
from mango_conformance.model import ALL_PATHS, ESCAPES, MachineLimits, expect
from mango_conformance.scripts import CAT_ARG, EXIT_WITH, PATH_STATE, TOUCH, sh_command

__all__ = ["ALL_PATHS", "ESCAPES", "LifecycleMachine", "MachineLimits"]

_WORD_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


class LifecycleMachine(MachineBase):
    """Sessions through create, attach, files, exec, ownership and destroy, against a model.

    Bind it to a target with :meth:`~MachineBase.bind`, or subclass it and set
    the class attributes ``target`` (and optionally ``options``, ``limits``,
    ``scratch_dir``, ``ledger``); then ``run_state_machine_as_test(Bound)`` or
    ``TestX = Bound.TestCase``.
    """

    # ------------------------------------------------------------------ rules

    @initialize()
    def first_client_and_session(self) -> None:
        """Open client 0 and create the first Session."""
        self._create_session(self._open_client())

    @precondition(lambda self: self._can_call() and len(self._clients) < self.limits.max_clients)
    @rule()
    def new_client(self) -> None:
        """A worker restart: a fresh provider with the same name (L-01)."""
        self._open_client()

    @precondition(
        lambda self: self._can_call() and len(self._live()) < self.limits.max_live_sandboxes
    )
    @rule(data=st.data())
    def create_session(self, data: st.DataObject) -> None:
        """Create a Session with a fresh key."""
        self._create_session(self._draw_client(data))

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(data=st.data())
    def recreate_idempotent(self, data: st.DataObject) -> None:
        """L-03a/b: create again with the same key gives the same ref and workspace."""
        session = self._draw_session(data, self._live())
        client = self._draw_client(data)
        sandbox = self._call(
            self._clients[client].create(session.key, self.options.spec),
            f"create({session.key!r}) again",
        )
        if sandbox.ref != session.ref:
            self._extras.append((session.key, sandbox))
            raise AssertionError(
                f"create({session.key!r}) again returned {sandbox.ref}, first {session.ref}"
            )
        self._add_handle(session, client, sandbox, "recreate")
        self._check_one_file(data, session, sandbox)

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(data=st.data())
    def attach(self, data: st.DataObject) -> None:
        """L-03c: attach with the right key and ref sees the workspace."""
        session = self._draw_session(data, self._live())
        client = self._draw_client(data)
        sandbox = self._call(
            self._clients[client].attach(session.key, session.ref, self.options.spec),
            f"attach({session.key!r}, {session.ref})",
        )
        assert sandbox.ref == session.ref, f"attach returned {sandbox.ref}, asked {session.ref}"
        self._add_handle(session, client, sandbox, "attach")
        self._check_one_file(data, session, sandbox)

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(data=st.data())
    def write(self, data: st.DataObject) -> None:
        """L-02b: write a file through any handle (overwrites test truncation)."""
        session = self._draw_session(data, self._live())
        handle = self._draw_handle(data, session)
        # Overwriting a known file (often with shorter content) is what tests truncation.
        paths = st.sampled_from(ALL_PATHS)
        if session.files:
            paths = st.sampled_from(sorted(session.files)) | paths
        path = data.draw(paths, label="path")
        content = data.draw(st.binary(max_size=self.limits.max_file_bytes), label="content")
        overwrite = path in session.files
        self._call(handle.sandbox.write_file(path, content), f"write_file({path!r})")
        session.files[path] = content
        if overwrite:
            # Read back an overwrite at once, through any handle: the old bytes must be gone.
            self._check_file(session, self._draw_handle(data, session).sandbox, path)

    @precondition(lambda self: self._can_call() and any(s.files for s in self._live()))
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        """L-02b: a written file reads back exactly, through any handle."""
        session = self._draw_session(data, [s for s in self._live() if s.files])
        self._check_one_file(data, session, self._draw_handle(data, session).sandbox)

    @precondition(
        lambda self: self._can_call() and any(len(s.files) < len(ALL_PATHS) for s in self._live())
    )
    @rule(data=st.data())
    def read_absent(self, data: st.DataObject) -> None:
        """Reading a path never written raises FileNotFoundError."""
        session = self._draw_session(
            data, [s for s in self._live() if len(s.files) < len(ALL_PATHS)]
        )
        absent = sorted(set(ALL_PATHS) - set(session.files))
        path = data.draw(st.sampled_from(absent), label="absent path")
        sandbox = self._draw_handle(data, session).sandbox
        expect(
            (FileNotFoundError,),
            lambda: self._call(sandbox.read_file(path), f"read_file({path!r})"),
            f"read_file({path!r}) of a file never written",
        )

    @precondition(lambda self: self._can_call() and any(s.files for s in self._live()))
    @rule(data=st.data())
    def shell_sees_tool_writes(self, data: st.DataObject) -> None:
        """``cat root/path`` in the shell prints what write_file wrote."""
        session = self._draw_session(data, [s for s in self._live() if s.files])
        path = data.draw(st.sampled_from(sorted(session.files)), label="known file")
        sandbox = self._draw_handle(data, session).sandbox
        command = sh_command(self.options.shell, CAT_ARG, posixpath.join(sandbox.root, path))
        result = self._call(sandbox.exec(command), f"exec(cat {path})")
        assert result.exit_code == 0, f"cat {path}: exit {result.exit_code} {result.stderr[:200]!r}"
        assert result.stdout == session.files[path], f"the shell sees {result.stdout!r} in {path}"

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(
        data=st.data(),
        token=st.text(alphabet=_WORD_ALPHABET, min_size=1, max_size=16),
        code=st.integers(0, 125),
    )
    def exec_exit_code(self, data: st.DataObject, token: str, code: int) -> None:
        """L-02c/d: exact stdout, and the exit code is data."""
        session = self._draw_session(data, self._live())
        sandbox = self._draw_handle(data, session).sandbox
        command = sh_command(self.options.shell, EXIT_WITH, token, str(code))
        result = self._call(sandbox.exec(command), f"exec(printf {token}; exit {code})")
        assert result.exit_code == code, f"exit {code} gave exit code {result.exit_code}"
        assert result.stdout == token.encode(), f"stdout {result.stdout!r}, expected {token!r}"
        assert not result.timed_out

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(data=st.data(), template=st.sampled_from(ESCAPES))
    def escape_rejected(self, data: st.DataObject, template: str) -> None:
        """L-02f: reading or writing an escaping path raises PathEscapeError; nothing lands."""
        session = self._draw_session(data, self._live())
        sandbox = self._draw_handle(data, session).sandbox
        path = template.format(token=self._token())
        expect(
            (PathEscapeError,),
            lambda: self._call(sandbox.read_file(path), f"read_file({path!r})"),
            f"read_file({path!r})",
        )
        expect(
            (PathEscapeError,),
            lambda: self._call(sandbox.write_file(path, b"escaped"), f"write_file({path!r})"),
            f"write_file({path!r})",
        )
        outside = path if path.startswith("/") else posixpath.join(sandbox.root, path)
        probe = sh_command(self.options.shell, PATH_STATE, posixpath.normpath(outside))
        result = self._call(sandbox.exec(probe), f"exec(test -e {outside})")
        assert result.stdout == b"absent", f"the rejected write still created {outside}"

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(data=st.data(), turns=st.integers(0, 2))
    def exec_cancelled_early(self, data: st.DataObject, turns: int) -> None:
        """L-02g: an exec cancelled before it starts (``turns=0``) or at an early
        suspension raises CancelledError; a pre-cancelled one runs nothing."""
        session = self._draw_session(data, self._live())
        sandbox = self._draw_handle(data, session).sandbox
        marker = f"precancel-{next(self._tokens)}.marker"
        command = sh_command(self.options.shell, TOUCH, marker, "ran")

        async def scenario() -> str:
            task = asyncio.ensure_future(sandbox.exec(command))
            for _ in range(turns):
                await asyncio.sleep(0)
            if task.done():
                return "finished before the cancel"
            task.cancel()
            await asyncio.wait({task})
            if task.cancelled():
                return "cancelled"
            error = task.exception()
            return f"raised {error!r}" if error is not None else f"returned {task.result()!r}"

        outcome = self._call(scenario(), f"exec cancelled after {turns} turn(s)")
        if turns == 0 or outcome != "finished before the cancel":
            assert outcome == "cancelled", f"an exec cancelled after {turns} turn(s) {outcome}"
        if turns == 0:
            expect(
                (FileNotFoundError,),
                lambda: self._call(sandbox.read_file(marker), f"read_file({marker!r})"),
                "the marker of a pre-cancelled exec",
            )

    @precondition(lambda self: self._can_call() and bool(self._sessions))
    @rule(data=st.data())
    def attach_foreign_key(self, data: st.DataObject) -> None:
        """L-04a: attach with another Session's key is an OwnershipError (or NotFound if gone)."""
        session = self._draw_session(data, list(self._sessions.values()))
        others = [key for key in self._sessions if key != session.key]
        foreign = data.draw(st.sampled_from([session.key + "-other", *others]), label="key")
        client = self._clients[self._draw_client(data)]
        allowed: tuple[type[BaseException], ...] = (
            (OwnershipError,) if session.live else (OwnershipError, SandboxNotFound)
        )
        error = expect(
            allowed,
            lambda: self._call(
                client.attach(foreign, session.ref, self.options.spec),
                f"attach({foreign!r}, {session.ref})",
            ),
            f"attach of {session.key}'s ref with the key {foreign!r}",
        )
        if isinstance(error, OwnershipError):
            assert is_permanent(error)

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(data=st.data())
    def attach_wrong_provider(self, data: st.DataObject) -> None:
        """L-04b: a ref naming another provider is an OwnershipError."""
        session = self._draw_session(data, self._live())
        client = self._clients[self._draw_client(data)]
        foreign = SandboxRef(provider=f"{self._name}-x", external_id=session.ref.external_id)
        error = expect(
            (OwnershipError,),
            lambda: self._call(
                client.attach(session.key, foreign, self.options.spec), f"attach({foreign})"
            ),
            f"attach of {foreign}",
        )
        assert is_permanent(error)

    @precondition(lambda self: self._can_call() and bool(self._live()))
    @rule(data=st.data())
    def destroy(self, data: st.DataObject) -> None:
        """L-05a/b: destroy through a handle of any origin, maybe at once again; retire the key."""
        session = self._draw_session(data, self._live())
        handle = self._draw_handle(data, session)
        self._call(handle.sandbox.destroy(), f"destroy({session.key!r}) via {handle.origin}")
        session.live = False
        self._retired.add(session.key)
        if data.draw(st.booleans(), label="destroy again at once"):
            again = self._draw_handle(data, session)
            self._call(
                again.sandbox.destroy(), f"destroy({session.key!r}) again via {again.origin}"
            )

    @precondition(
        lambda self: self._can_call() and any(not s.live for s in self._sessions.values())
    )
    @rule(data=st.data())
    def destroy_again(self, data: st.DataObject) -> None:
        """L-05b: destroying again through a stale handle succeeds."""
        session = self._draw_session(data, [s for s in self._sessions.values() if not s.live])
        handle = self._draw_handle(data, session)
        self._call(handle.sandbox.destroy(), f"destroy({session.key!r}) again")

    @precondition(
        lambda self: self._can_call() and any(not s.live for s in self._sessions.values())
    )
    @rule(data=st.data())
    def attach_after_destroy(self, data: st.DataObject) -> None:
        """L-05c: attach to a destroyed Session raises SandboxNotFound (nothing is recreated)."""
        session = self._draw_session(data, [s for s in self._sessions.values() if not s.live])
        client = self._clients[self._draw_client(data)]
        try:
            sandbox = self._call(
                client.attach(session.key, session.ref, self.options.spec),
                f"attach({session.key!r}) after destroy",
            )
        except SandboxNotFound:
            return
        except Exception as exc:
            raise AssertionError(
                f"attach after destroy raised {exc!r}, expected SandboxNotFound"
            ) from exc
        self._extras.append((session.key, sandbox))
        raise AssertionError(f"attach after destroy of {session.key} succeeded")

    @precondition(
        lambda self: (
            self._can_call()
            and any(
                set(a.files) - set(b.files)
                for a in self._live()
                for b in self._live()
                if a.key != b.key
            )
        )
    )
    @rule(data=st.data())
    def isolation_probe(self, data: st.DataObject) -> None:
        """A file of one Session is absent from another (1.8#7: compared by visibility)."""
        live = self._live()
        owners = [
            a for a in live if any(set(a.files) - set(b.files) for b in live if b.key != a.key)
        ]
        owner = self._draw_session(data, owners)
        strangers = [b for b in live if b.key != owner.key and set(owner.files) - set(b.files)]
        stranger = self._draw_session(data, strangers)
        path = data.draw(
            st.sampled_from(sorted(set(owner.files) - set(stranger.files))), label="path"
        )
        sandbox = self._draw_handle(data, stranger).sandbox
        expect(
            (FileNotFoundError,),
            lambda: self._call(sandbox.read_file(path), f"read_file({path!r})"),
            f"{stranger.key} reading {path}, which only {owner.key} wrote",
        )

    @precondition(lambda self: self.limits.deep_checks and self._can_call() and bool(self._live()))
    @rule(data=st.data())
    def deep_check(self, data: st.DataObject) -> None:
        """Attach through any client and read back every file of the Session."""
        session = self._draw_session(data, self._live())
        client = self._draw_client(data)
        sandbox = self._call(
            self._clients[client].attach(session.key, session.ref, self.options.spec),
            f"attach({session.key!r}) for a deep check",
        )
        self._add_handle(session, client, sandbox, "attach")
        for path, expected in sorted(session.files.items()):
            got = self._call(sandbox.read_file(path), f"read_file({path!r})")
            assert got == expected, f"{session.key}:{path}: read {got!r}, wrote {expected!r}"

    @rule()
    def check_model(self) -> None:
        """Model only: keeps a valid step available once the call budget is spent."""
