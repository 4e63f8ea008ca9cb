"""Parity checks: one test per check of the reference core suite, with its fixed inputs.

Test names carry the reference ids (L-01 ... L-05c), so a failure maps
straight to the contract it breaks.
"""

# Checks are plain asserts on purpose: pytest rewrites them for detailed failure reports.
# ruff: noqa: S101

from __future__ import annotations

import asyncio

import pytest

from mango.provider import (
    Command,
    OwnershipError,
    PathEscapeError,
    Sandbox,
    SandboxNotFound,
    SandboxRef,
    is_permanent,
    validate_provider_name,
)
from mango_conformance.checks import mark_checks
from mango_conformance.harness import Harness
from mango_conformance.scripts import TOUCH

__all__ = ["ParityChecks", "run_precancelled"]

STATE_PAYLOAD = b"durable\x00\n"
"""L-02b: nine binary bytes: ``durable``, a NUL and a newline."""


def run_precancelled(harness: Harness, sandbox: Sandbox, command: Command) -> asyncio.Task[object]:
    """Start ``sandbox.exec(command)`` in a task cancelled before its first step; return it done."""

    async def scenario() -> asyncio.Task[object]:
        task: asyncio.Task[object] = asyncio.ensure_future(sandbox.exec(command))
        task.cancel()
        await asyncio.wait({task})
        return task

    return harness.run(scenario(), "pre-cancelled exec")


class ParityChecks:
    """L-01 to L-05: identity, exec and files, idempotent create, ownership, destroy."""

    def test_l01_provider_name_is_stable(self, conformance: Harness) -> None:
        """L-01: two fresh providers report the same canonical, non-empty name."""
        first = conformance.open_provider()
        second = conformance.open_provider()
        assert first is not second, "each entry of the target must yield a fresh provider"
        assert first.name, "the provider name is empty"
        assert validate_provider_name(first.name) == first.name
        assert first.name == second.name
        assert first.name == conformance.name, "the name differs from the target's provider name"

    def test_l02a_root_is_not_empty(self, conformance: Harness) -> None:
        """L-02a: a created sandbox reports a non-empty workspace root."""
        sandbox = conformance.create()
        assert isinstance(sandbox.root, str)
        assert sandbox.root

    def test_l02b_binary_round_trip_creates_parents(self, conformance: Harness) -> None:
        """L-02b: writing nested/state.bin creates its parent and reads back byte for byte."""
        sandbox = conformance.create()
        assert conformance.run(sandbox.write_file("nested/state.bin", STATE_PAYLOAD)) is None
        assert conformance.run(sandbox.read_file("nested/state.bin")) == STATE_PAYLOAD

    def test_l02c_exec_stdout_is_exact(self, conformance: Harness) -> None:
        """L-02c: ``printf conformance-exec`` exits 0 with exactly that stdout."""
        sandbox = conformance.create()
        result = conformance.sh(sandbox, "printf conformance-exec")
        assert result.exit_code == 0
        assert result.stdout == b"conformance-exec"
        assert not result.timed_out

    def test_l02d_non_zero_exit_is_data(self, conformance: Harness) -> None:
        """L-02d: ``exit 7`` is a result with exit code 7, not an error."""
        sandbox = conformance.create()
        result = conformance.sh(sandbox, "exit 7")
        assert result.exit_code == 7, f"exit 7 gave exit code {result.exit_code}"
        assert not result.timed_out

    def test_l02f_escape_is_rejected(self, conformance: Harness) -> None:
        """L-02f: reading and writing ``../escape`` raise PathEscapeError."""
        sandbox = conformance.create()
        with pytest.raises(PathEscapeError):
            conformance.run(sandbox.read_file("../escape"))
        with pytest.raises(PathEscapeError):
            conformance.run(sandbox.write_file("../escape", b"x"))

    def test_l02g_precancelled_exec_raises_cancelled(self, conformance: Harness) -> None:
        """L-02g: an exec whose task is cancelled before it starts raises and runs nothing."""
        sandbox = conformance.create()
        task = run_precancelled(
            conformance, sandbox, conformance.command(TOUCH, "precancel.marker", "ran")
        )
        assert task.cancelled(), "the exec task finished instead of raising CancelledError"
        with pytest.raises(FileNotFoundError):
            conformance.run(sandbox.read_file("precancel.marker"))

    def test_l03a_create_is_idempotent_across_instances(self, conformance: Harness) -> None:
        """L-03a: a fresh provider creating the same key gets the same ref."""
        key = conformance.new_key("l03a")
        first = conformance.create(key)
        ref = first.ref
        assert ref.provider == conformance.provider.name
        assert ref.external_id
        again = conformance.create(key, conformance.open_provider())
        assert again.ref == ref

    def test_l03b_recreate_preserves_workspace(self, conformance: Harness) -> None:
        """L-03b: the sandbox from a repeated create still holds restart.txt."""
        key = conformance.new_key("l03b")
        first = conformance.create(key)
        conformance.run(first.write_file("restart.txt", b"preserved"))
        again = conformance.create(key, conformance.open_provider())
        assert conformance.run(again.read_file("restart.txt")) == b"preserved"

    def test_l03c_attach_from_fresh_instance_preserves_workspace(
        self, conformance: Harness
    ) -> None:
        """L-03c: a fresh provider attaches with the key and ref and reads restart.txt."""
        key = conformance.new_key("l03c")
        first = conformance.create(key)
        conformance.run(first.write_file("restart.txt", b"preserved"))
        attached = conformance.attach(key, first.ref, conformance.open_provider())
        assert attached.ref == first.ref
        assert conformance.run(attached.read_file("restart.txt")) == b"preserved"

    def test_l04a_foreign_session_key_is_permanent(self, conformance: Harness) -> None:
        """L-04a: attaching with another Session key raises a permanent OwnershipError."""
        key = conformance.new_key("l04a")
        sandbox = conformance.create(key)
        with pytest.raises(OwnershipError) as caught:
            conformance.attach(key + "-other", sandbox.ref)
        assert is_permanent(caught.value)

    def test_l04b_wrong_provider_name_is_permanent(self, conformance: Harness) -> None:
        """L-04b: attaching a ref that names another provider raises a permanent OwnershipError."""
        key = conformance.new_key("l04b")
        sandbox = conformance.create(key)
        other = "wrong-provider" if conformance.name != "wrong-provider" else "other-provider"
        foreign = SandboxRef(provider=other, external_id=sandbox.ref.external_id)
        with pytest.raises(OwnershipError) as caught:
            conformance.attach(key, foreign)
        assert is_permanent(caught.value)

    def test_l05ab_destroy_is_idempotent(self, conformance: Harness) -> None:
        """L-05a/b: destroy succeeds, and a second destroy on the same handle succeeds too."""
        sandbox = conformance.create()
        assert conformance.run(sandbox.destroy()) is None
        assert conformance.run(sandbox.destroy()) is None

    def test_l05c_attach_after_destroy_is_not_found(self, conformance: Harness) -> None:
        """L-05c: after destroy, a fresh provider's attach raises SandboxNotFound."""
        key = conformance.new_key("l05c")
        sandbox = conformance.create(key)
        conformance.run(sandbox.destroy())
        with pytest.raises(SandboxNotFound):
            conformance.attach(key, sandbox.ref, conformance.open_provider())


mark_checks(ParityChecks, pytest.mark.mango_parity)
