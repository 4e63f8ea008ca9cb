-- mango 0001: Sessions with their deletion fence, sandbox provisioning intents and bindings.
--
-- No foreign key cascades: a Session row cannot be deleted while an intent or a
-- binding (the last durable pointer to a live provider resource) still refers
-- to it. No column holds a credential.

CREATE TABLE mango_sessions (
    id          text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 255),
    created_at  timestamptz NOT NULL DEFAULT now(),
    deleting_at timestamptz
);

CREATE INDEX mango_sessions_created_idx ON mango_sessions (created_at, id);

CREATE INDEX mango_sessions_deleting_idx
    ON mango_sessions (deleting_at, id)
    WHERE deleting_at IS NOT NULL;

CREATE TABLE mango_sandbox_provisioning_intents (
    session_id  text        PRIMARY KEY REFERENCES mango_sessions (id),
    provider    text        NOT NULL CHECK (provider <> ''),
    spec        jsonb       NOT NULL,
    spec_hash   text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The reconciler scans one provider's intents, oldest first.
CREATE INDEX mango_sandbox_provisioning_intents_scan_idx
    ON mango_sandbox_provisioning_intents (provider, created_at, session_id);

CREATE TABLE mango_sandbox_bindings (
    session_id  text        PRIMARY KEY REFERENCES mango_sessions (id),
    provider    text        NOT NULL CHECK (provider <> ''),
    external_id text        NOT NULL CHECK (external_id <> ''),
    spec_hash   text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT mango_sandbox_bindings_ref_key UNIQUE (provider, external_id)
);
