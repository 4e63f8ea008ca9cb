-- mango 0003: the persisted loss mark of a sandbox binding.
--
-- Set once, when the provider reports the bound resource gone (attach,
-- keep-alive, or any operation of a cached client). A lost binding is never
-- replaced by a new resource; it is removed only when its Session is deleted.

ALTER TABLE mango_sandbox_bindings ADD COLUMN lost_at timestamptz;
