"""Two workers for two providers on one database and one namespace."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from mango.app import SandboxWrapper
from mango.domain import (
    CapabilitySet,
    OwnershipError,
    ProviderRegistration,
    ProvisioningIntent,
    SandboxRef,
    SandboxSpec,
    SupportLevel,
    spec_hash,
)
from mango.domain.registry import ProviderContext, ProviderRegistry
from mango.local import LocalProvider
from mango.plugins import hookimpl, load_plugins
from mango.temporal import ToolCall, task_queue_for
from mango.temporal.messages import FinishDeletionsInput, ReconcileInput, ToolStepInput

from .support import Harness, session_dirs, wait_until

pytestmark = [pytest.mark.temporal, pytest.mark.postgres]

ALT = "alt"


@attrs.define
class AltSandbox(SandboxWrapper):
    """A local sandbox that reports itself as provider ``alt``."""

    @property
    def ref(self) -> SandboxRef:
        return SandboxRef(ALT, self.inner.ref.external_id)


@attrs.define
class AltProvider:
    """A second provider: the local provider under another name and directory."""

    inner: LocalProvider
    name: str = ALT
    capabilities: CapabilitySet = attrs.field(factory=CapabilitySet)

    async def create(self, session_key: str, spec: SandboxSpec) -> AltSandbox:
        return AltSandbox(await self.inner.create(session_key, spec))

    async def attach(self, session_key: str, ref: SandboxRef, spec: SandboxSpec) -> AltSandbox:
        if ref.provider != ALT:
            raise OwnershipError(f"{ref} is not an {ALT} reference")
        inner = SandboxRef("local", ref.external_id)
        return AltSandbox(await self.inner.attach(session_key, inner, spec))

    async def find(self, session_key: str) -> SandboxRef | None:
        found = await self.inner.find(session_key)
        return None if found is None else SandboxRef(ALT, found.external_id)

    async def destroy(self, session_key: str, ref: SandboxRef) -> None:
        if ref.provider != ALT:
            raise OwnershipError(f"{ref} is not an {ALT} reference")
        await self.inner.destroy(session_key, SandboxRef("local", ref.external_id))

    async def health(self) -> str:
        return await self.inner.health()

    async def aclose(self) -> None:
        await self.inner.aclose()


@attrs.define
class AltPlugin:
    """Registers ``alt`` through the plugin hook, as a third-party plugin would."""

    base: Path

    @hookimpl
    def mango_register_providers(self, registry: ProviderRegistry) -> None:
        registry.add(
            ProviderRegistration(
                name=ALT,
                capabilities=CapabilitySet(),
                support_level=SupportLevel.PREVIEW,
                settings=(),
                factory=lambda context: AltProvider(
                    LocalProvider(self.base, namespace=context.namespace)
                ),
            )
        )


def bash(command: str) -> ToolCall:
    """A bash tool call."""
    return ToolCall("bash", {"command": command})


async def test_each_worker_touches_only_its_providers_sessions(
    harness: Harness, tmp_path: Path
) -> None:
    """Routing follows bindings and intents; another provider's binding is an explained refusal."""
    alt_dir = tmp_path / "alt-sandboxes"
    registry = load_plugins(extra=[AltPlugin(alt_dir)], entry_points=False).providers()
    alt_provider = registry.open(ALT, ProviderContext(namespace="routing-test", environ={}))
    store, env = harness.store, ActivityEnvironment()
    to_local = harness.orchestrator
    to_alt = harness.orchestrator_with(default_provider=ALT)
    on_local, on_alt, alt_intent = (
        harness.sid("on-local"),
        harness.sid("on-alt"),
        harness.sid("intent"),
    )

    async with harness.worker() as local, harness.run_worker(alt_provider, store) as alt:
        assert (local.task_queue, alt.task_queue) == (
            task_queue_for("local", harness.queue_prefix),
            task_queue_for(ALT, harness.queue_prefix),
        )
        await to_local.run_tool(on_local, bash("true"))
        await to_alt.run_tool(on_alt, bash("true"))
        assert (await store.get_binding(on_alt)).ref.provider == ALT
        assert (len(session_dirs(harness.sandbox_dir)), len(session_dirs(alt_dir))) == (1, 1)

        # A client whose default is 'local' still reaches the alt worker through the binding.
        again = await to_local.run_tool(on_alt, bash("echo routed"))
        assert again.output == "routed\n"
        assert (len(session_dirs(harness.sandbox_dir)), len(session_dirs(alt_dir))) == (1, 1)

        # The local worker refuses the alt binding, permanently and with the way out.
        with pytest.raises(ApplicationError) as caught:
            await env.run(local.execute_tool, ToolStepInput(session_id=on_alt, call=bash("true")))
        assert (caught.value.type, caught.value.non_retryable) == ("OwnershipError", True)
        assert f"MANGO_SANDBOX={ALT}" in caught.value.details[0]

        # Intents: each worker lists and reconciles only its own provider's.
        await store.ensure_session(alt_intent)
        spec = SandboxSpec()
        await store.put_intent(ProvisioningIntent(alt_intent, ALT, spec, spec_hash(spec)))
        local_report = await env.run(local.reconcile_provisioning, ReconcileInput())
        assert (local_report.attempted, await store.get_intent(alt_intent) is not None) == (0, True)
        alt_report = await env.run(alt.reconcile_provisioning, ReconcileInput())
        assert (alt_report.attempted, alt_report.completed) == (1, 1)
        assert (await store.get_binding(alt_intent)).ref.provider == ALT

        # Deletion is routed by the binding, whatever the client's default.
        assert await to_local.delete_session(on_alt) is True
        assert (len(session_dirs(harness.sandbox_dir)), len(session_dirs(alt_dir))) == (1, 1)

        # Interrupted deletions: only the owning provider's reconciler picks them up.
        await store.fence_session(alt_intent)
        skipped = await env.run(local.finish_deletions, FinishDeletionsInput())
        assert skipped.attempted == 0
        started = await env.run(alt.finish_deletions, FinishDeletionsInput(policy=to_local.policy))
        assert (started.attempted, started.completed) == (1, 1)

        async def gone() -> bool:
            return await store.get_session(alt_intent) is None

        await wait_until(gone, 60, "the alt cleanup to finish")
    assert (len(session_dirs(harness.sandbox_dir)), len(session_dirs(alt_dir))) == (1, 0)
    assert (await store.get_binding(on_local)).ref.provider == "local"
