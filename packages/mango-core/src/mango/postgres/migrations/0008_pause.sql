-- mango 0008: the pause mark of a sandbox binding.
--
-- paused_at is set before the provider pauses the bound resource and cleared
-- after it resumed it, so a resource that may be paused always has a paused
-- record: a crash between the two steps leaves a paused record over a running
-- resource, which the next use resumes (resume is idempotent).
-- pause_finished_at records that the provider confirmed the pause; the idle
-- eviction pass lists the pauses it has not, and finishes them.
-- A paused binding still holds its place under MANGO_MAX_SANDBOXES.

ALTER TABLE mango_sandbox_bindings
    ADD COLUMN paused_at         timestamptz,
    ADD COLUMN pause_finished_at timestamptz,
    ADD CONSTRAINT mango_sandbox_bindings_pause_check
        CHECK (pause_finished_at IS NULL OR paused_at IS NOT NULL);

-- ... the pauses the provider has not confirmed, for the eviction pass.
CREATE INDEX mango_sandbox_bindings_pausing_idx
    ON mango_sandbox_bindings (provider, paused_at, session_id)
    WHERE paused_at IS NOT NULL AND pause_finished_at IS NULL;
