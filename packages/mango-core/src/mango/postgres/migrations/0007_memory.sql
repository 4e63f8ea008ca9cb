-- mango 0007: Memory Stores, their memories (heads) and immutable versions,
-- and the stores a Session attaches.
--
-- A memory's head (mango_memories) is its current path and content; every
-- change to it inserts a version (mango_memory_versions), which is never
-- updated again except to redact it (both redaction fields or neither).
-- A version outlives its head (no foreign key on memory_id): a deleted
-- memory keeps its history. Archived stores (archived_at set) are read-only.
-- A Session's attachments are fixed at its creation; a store cannot be
-- removed while a Session attaches it, nor a Session while it has any
-- (no cascade from mango_sessions, as in 0001).

CREATE TABLE mango_memory_stores (
    id           text        PRIMARY KEY CHECK (id ~ '^memstore-[0-9a-f]{32}$'),
    name         text        NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 255),
    slug         text        NOT NULL CHECK (octet_length(slug) BETWEEN 1 AND 255),
    description  text        NOT NULL DEFAULT '',
    metadata     jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    archived_at  timestamptz
);

CREATE INDEX mango_memory_stores_created_idx ON mango_memory_stores (created_at DESC, id DESC);

CREATE TABLE mango_memories (
    id                  text        PRIMARY KEY CHECK (id ~ '^mem-[0-9a-f]{32}$'),
    memory_store_id     text        NOT NULL REFERENCES mango_memory_stores (id) ON DELETE CASCADE,
    memory_version_id   text        NOT NULL,
    path                text        NOT NULL CHECK (octet_length(path) BETWEEN 2 AND 1024),
    content             text        NOT NULL,
    content_size_bytes  bigint      NOT NULL CHECK (content_size_bytes BETWEEN 0 AND 102400),
    content_sha256      text        NOT NULL CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    CONSTRAINT mango_memories_path_key UNIQUE (memory_store_id, path)
);

CREATE TABLE mango_memory_versions (
    id                  text        PRIMARY KEY CHECK (id ~ '^memver-[0-9a-f]{32}$'),
    memory_store_id     text        NOT NULL REFERENCES mango_memory_stores (id) ON DELETE CASCADE,
    memory_id           text        NOT NULL,
    operation           text        NOT NULL,
    path                text        NOT NULL CHECK (octet_length(path) BETWEEN 2 AND 1024),
    content             text,
    content_size_bytes  bigint      CHECK (content_size_bytes BETWEEN 0 AND 102400),
    content_sha256      text        CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    created_at          timestamptz NOT NULL,
    created_by_type     text        NOT NULL,
    created_by_id       text        NOT NULL CHECK (octet_length(created_by_id) BETWEEN 1 AND 255),
    redacted_at         timestamptz,
    redacted_by_type    text,
    redacted_by_id      text,
    CONSTRAINT mango_memory_versions_operation_check
        CHECK (operation IN ('created', 'modified', 'deleted')),
    CONSTRAINT mango_memory_versions_actor_check
        CHECK (created_by_type IN ('api_actor', 'session_actor', 'user_actor')),
    CONSTRAINT mango_memory_versions_redactor_check
        CHECK (redacted_by_type IS NULL
               OR redacted_by_type IN ('api_actor', 'session_actor', 'user_actor')),
    CONSTRAINT mango_memory_versions_redaction_check
        CHECK ((redacted_by_type IS NULL) = (redacted_by_id IS NULL)
               AND (redacted_by_type IS NULL) = (redacted_at IS NULL)),
    -- A deleted version has no content; any other has it until it is redacted.
    CONSTRAINT mango_memory_versions_content_check
        CHECK (CASE WHEN operation = 'deleted'
                    THEN content IS NULL AND content_sha256 IS NULL AND content_size_bytes IS NULL
                    ELSE redacted_at IS NOT NULL
                         OR (content IS NOT NULL AND content_sha256 IS NOT NULL
                             AND content_size_bytes IS NOT NULL)
               END)
);

-- A store's history, newest first; one memory's history; one path's history.
CREATE INDEX mango_memory_versions_store_idx
    ON mango_memory_versions (memory_store_id, created_at DESC, id DESC);
CREATE INDEX mango_memory_versions_memory_idx
    ON mango_memory_versions (memory_store_id, memory_id, created_at DESC, id DESC);
CREATE INDEX mango_memory_versions_path_idx
    ON mango_memory_versions (memory_store_id, path, created_at, id);

CREATE TABLE mango_session_memory_stores (
    session_id       text        NOT NULL REFERENCES mango_sessions (id),
    memory_store_id  text        NOT NULL REFERENCES mango_memory_stores (id) ON DELETE RESTRICT,
    access           text        NOT NULL,
    slug             text        NOT NULL CHECK (octet_length(slug) BETWEEN 1 AND 255),
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, memory_store_id),
    CONSTRAINT mango_session_memory_stores_access_check
        CHECK (access IN ('read_only', 'read_write')),
    CONSTRAINT mango_session_memory_stores_slug_key UNIQUE (session_id, slug)
);

-- Which Sessions attach a store.
CREATE INDEX mango_session_memory_stores_store_idx
    ON mango_session_memory_stores (memory_store_id);
