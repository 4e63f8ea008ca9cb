-- mango 0005: the fleet: places under MANGO_MAX_SANDBOXES, last use, idle eviction.
--
-- An intent's reserved_at is set when it takes its place under the
-- deployment's limit, before its resource is created (under an advisory lock
-- that serialises the count and the reservation). Intents written before this
-- migration may already have a resource, so they hold a place.
--
-- A binding's last_used_at is written (coarsely) when a Session's sandbox is
-- acquired; existing bindings count as used now, so an upgrade evicts nothing
-- at once. evicted_at marks the idle eviction (the resource is destroyed
-- next; eviction_finished_at once it was). An evicted binding, like a lost
-- one, is never replaced, only deleted with its Session.

ALTER TABLE mango_sandbox_provisioning_intents ADD COLUMN reserved_at timestamptz;
UPDATE mango_sandbox_provisioning_intents SET reserved_at = created_at;

ALTER TABLE mango_sandbox_bindings
    ADD COLUMN last_used_at         timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN evicted_at           timestamptz,
    ADD COLUMN eviction_finished_at timestamptz,
    ADD CONSTRAINT mango_sandbox_bindings_eviction_check
        CHECK (eviction_finished_at IS NULL OR evicted_at IS NOT NULL);

-- The eviction pass scans one provider's live bindings, longest unused first.
CREATE INDEX mango_sandbox_bindings_idle_idx
    ON mango_sandbox_bindings (provider, last_used_at, session_id)
    WHERE lost_at IS NULL AND evicted_at IS NULL;

-- ... and the evictions whose destroy did not finish.
CREATE INDEX mango_sandbox_bindings_evicting_idx
    ON mango_sandbox_bindings (provider, evicted_at, session_id)
    WHERE evicted_at IS NOT NULL AND eviction_finished_at IS NULL;
