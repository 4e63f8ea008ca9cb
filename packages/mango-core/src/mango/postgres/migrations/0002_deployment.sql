-- mango 0002: the deployment's namespace, generated once per database.
--
-- Exactly one row (the CHECK pins the key). Providers put the namespace in
-- every ownership label and deterministic name, so two deployments sharing a
-- backend never see each other's resources. The store inserts a random value
-- if absent and reads back whichever insert won.

CREATE TABLE mango_deployment (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    namespace  text        NOT NULL CHECK (namespace ~ '^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$'),
    created_at timestamptz NOT NULL DEFAULT now()
);
