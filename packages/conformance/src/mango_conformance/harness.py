"""The per-check harness: fresh providers, tracked sandboxes, and cleanup that never raises."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from mango.provider import (
    Command,
    ConformanceTarget,
    ConformanceTestbed,
    ExecResult,
    Provider,
    Sandbox,
    SandboxRef,
    SandboxSpec,
    is_permanent,
)
from mango_conformance.bridge import AsyncBridge
from mango_conformance.cleanup import destroy_or_record, retire_uncertain
from mango_conformance.keys import new_session_key
from mango_conformance.ledger import Leak, LeakLedger, current_ledger
from mango_conformance.options import SuiteOptions
from mango_conformance.scripts import sh_command

__all__ = ["Harness"]

T = TypeVar("T")


class Harness:
    """Drives one target from a synchronous check.

    Every provider it opens comes from ``target.open(scratch_dir)``, so each
    is a fresh client of the same deployment. Every sandbox created through
    :meth:`create` is destroyed by :meth:`close`; what cannot be destroyed is
    written to the leak ledger instead of raising.
    """

    def __init__(
        self,
        target: ConformanceTarget,
        options: SuiteOptions,
        scratch_dir: Path,
        *,
        ledger: LeakLedger | None = None,
        where: str = "",
    ) -> None:
        self.target = target
        self.options = options
        self.scratch_dir = scratch_dir
        self.ledger = ledger if ledger is not None else current_ledger()
        self.where = where
        self.bridge = AsyncBridge(options.operation_timeout)
        self._stack = contextlib.AsyncExitStack()
        self._providers: list[Provider] = []
        self._created: list[tuple[str, Sandbox]] = []
        self._uncertain: list[tuple[Provider, str]] = []
        self._testbed: list[ConformanceTestbed | None] = []

    @property
    def name(self) -> str:
        """The provider name the target is registered under."""
        return self.target.provider

    def run(self, awaitable: Awaitable[T], what: str = "provider call") -> T:
        """Run one awaitable on the harness loop, bounded by ``operation_timeout``."""
        return self.bridge.run(awaitable, what)

    def open_provider(self) -> Provider:
        """Enter the target once more: a fresh provider (a restarted worker)."""
        provider = self.run(self._enter(), f"{self.name}: open()")
        self._providers.append(provider)
        return provider

    async def _enter(self) -> Provider:
        return await self._stack.enter_async_context(self.target.open(self.scratch_dir))

    @property
    def provider(self) -> Provider:
        """The first provider, opened on first use."""
        if not self._providers:
            self.open_provider()
        return self._providers[0]

    def testbed(self) -> ConformanceTestbed | None:
        """The target's testbed, opened on first use (``None`` if the target has none)."""
        if not self._testbed:
            opener = self.target.testbed
            if opener is None:
                self._testbed.append(None)
            else:
                entered = self.run(
                    self._stack.enter_async_context(opener(self.scratch_dir)),
                    f"{self.name}: testbed()",
                )
                self._testbed.append(entered)
        return self._testbed[0]

    def new_key(self, tag: str = "") -> str:
        """A fresh Session key."""
        return new_session_key(tag)

    def create(
        self,
        key: str | None = None,
        provider: Provider | None = None,
        *,
        spec: SandboxSpec | None = None,
    ) -> Sandbox:
        """``provider.create(key, spec)`` with the sandbox tracked for cleanup.

        ``spec`` defaults to the options' spec.
        """
        key = self.new_key() if key is None else key
        provider = self.provider if provider is None else provider
        spec = self.options.spec if spec is None else spec
        try:
            sandbox = self.run(provider.create(key, spec), f"create({key!r})")
        except Exception as exc:
            # A transient failure may still have created the resource.
            if not is_permanent(exc):
                self._uncertain.append((provider, key))
            raise
        self.track(key, sandbox)
        return sandbox

    def attach(
        self,
        key: str,
        ref: SandboxRef,
        provider: Provider | None = None,
        *,
        spec: SandboxSpec | None = None,
    ) -> Sandbox:
        """``provider.attach(key, ref, spec)``; a successful attach is tracked for cleanup."""
        provider = self.provider if provider is None else provider
        spec = self.options.spec if spec is None else spec
        sandbox = self.run(provider.attach(key, ref, spec), f"attach({key!r}, {ref})")
        self.track(key, sandbox)
        return sandbox

    def track(self, key: str, sandbox: Sandbox) -> None:
        """Destroy ``sandbox`` at cleanup."""
        self._created.append((key, sandbox))

    def sh(
        self,
        sandbox: Sandbox,
        script: str,
        *args: str,
        stdin: bytes = b"",
        timeout: float | None = None,
    ) -> ExecResult:
        """Run ``sh -c script sh args...`` in ``sandbox``."""
        return self.run(sandbox.exec(self.command(script, *args, stdin=stdin, timeout=timeout)))

    def command(
        self, script: str, *args: str, stdin: bytes = b"", timeout: float | None = None
    ) -> Command:
        """The :class:`Command` for ``sh -c script sh args...``."""
        return sh_command(self.options.shell, script, *args, stdin=stdin, timeout=timeout)

    def close(self) -> None:
        """Destroy what was created, close the providers, stop the loop. Never raises."""
        try:
            self.bridge.run(
                self._cleanup(),
                f"{self.name}: cleanup",
                timeout=self.options.operation_timeout * (2 + len(self._created)),
            )
        except Exception as exc:  # noqa: BLE001 - cleanup reports, it never raises
            self.ledger.record(
                Leak(self.name, "", None, f"cleanup failed: {exc!r}", where=self.where)
            )
        finally:
            self.bridge.close()

    async def _cleanup(self) -> None:
        seen: set[tuple[str, SandboxRef]] = set()
        for key, sandbox in self._created:
            ident = (key, sandbox.ref)
            if ident in seen:
                continue
            seen.add(ident)
            await destroy_or_record(
                sandbox,
                key,
                provider_name=self.name,
                reopen=self._enter,
                spec=self.options.spec,
                limit=self.options.operation_timeout,
                ledger=self.ledger,
                where=self.where,
            )
        await retire_uncertain(
            self._uncertain,
            spec=self.options.spec,
            limit=self.options.operation_timeout,
            ledger=self.ledger,
            where=self.where,
        )
        try:
            await self._stack.aclose()
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            self.ledger.record(
                Leak(self.name, "", None, f"provider aclose() failed: {exc!r}", where=self.where)
            )
