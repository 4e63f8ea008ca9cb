-- mango 0004: stored files (the Files store's rows) and Session resources.
--
-- A stored file's bytes live in the Files store under blob_key; the row says
-- what they must be. Uploads are two-phase: the row is inserted 'uploading'
-- (no size or digest yet), the bytes are streamed and verified, and only then
-- is the row 'ready' with the verified size and SHA-256. 'deleting' rows are
-- invisible; their blob goes first, then the row. updated_at is refreshed
-- while an upload streams, so the reconciler can tell a stalled upload from a
-- slow one.
--
-- A Session-scoped file (session_id set) is an output of that Session, at
-- output_path below its outputs mount; at most one ready file per path.
-- Session resources attach a file to a Session at a mount path; a file
-- cannot be removed while a resource refers to it, nor a Session while it
-- has resources or files (no cascades, as in 0001).

CREATE TABLE mango_files (
    id              text        PRIMARY KEY CHECK (id ~ '^file-[0-9a-f]{32}$'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    filename        text        NOT NULL CHECK (octet_length(filename) BETWEEN 1 AND 255),
    mime_type       text        NOT NULL CHECK (length(mime_type) BETWEEN 3 AND 255),
    size_bytes      bigint      CHECK (size_bytes >= 0),
    checksum_sha256 text        CHECK (checksum_sha256 ~ '^[0-9a-f]{64}$'),
    state           text        NOT NULL,
    session_id      text        REFERENCES mango_sessions (id),
    output_path     text        CHECK (octet_length(output_path) BETWEEN 1 AND 1024),
    blob_key        text        NOT NULL CHECK (length(blob_key) BETWEEN 1 AND 1024),
    CONSTRAINT mango_files_state_check
        CHECK (state IN ('uploading', 'ready', 'deleting')),
    CONSTRAINT mango_files_ready_check
        CHECK (state <> 'ready' OR (size_bytes IS NOT NULL AND checksum_sha256 IS NOT NULL)),
    CONSTRAINT mango_files_output_check
        CHECK (output_path IS NULL OR session_id IS NOT NULL),
    CONSTRAINT mango_files_blob_key_key UNIQUE (blob_key)
);

-- Listing ready files, oldest first.
CREATE INDEX mango_files_ready_idx ON mango_files (created_at, id) WHERE state = 'ready';

-- The reconciler's scans: stalled uploads and unfinished deletions.
CREATE INDEX mango_files_cleanup_idx ON mango_files (state, updated_at, id) WHERE state <> 'ready';

-- A Session's files (outputs), and one ready file per output path.
CREATE INDEX mango_files_session_idx
    ON mango_files (session_id, state, id) WHERE session_id IS NOT NULL;
CREATE UNIQUE INDEX mango_files_output_path_key
    ON mango_files (session_id, output_path) WHERE state = 'ready' AND output_path IS NOT NULL;

CREATE TABLE mango_session_resources (
    id          text        PRIMARY KEY CHECK (id ~ '^res-[0-9a-f]{32}$'),
    session_id  text        NOT NULL REFERENCES mango_sessions (id),
    kind        text        NOT NULL,
    file_id     text        REFERENCES mango_files (id),
    mount_path  text        NOT NULL CHECK (octet_length(mount_path) BETWEEN 1 AND 1024),
    state       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT mango_session_resources_kind_check CHECK (kind IN ('file')),
    CONSTRAINT mango_session_resources_state_check CHECK (state IN ('active', 'deleting')),
    CONSTRAINT mango_session_resources_file_check CHECK (kind <> 'file' OR file_id IS NOT NULL)
);

-- A materializer reads a Session's resources (deleting ones first, then by age).
CREATE INDEX mango_session_resources_session_idx
    ON mango_session_resources (session_id, state, created_at, id);

-- One active resource per mount path in a Session.
CREATE UNIQUE INDEX mango_session_resources_mount_key
    ON mango_session_resources (session_id, mount_path) WHERE state = 'active';

-- Which resources refer to a file (checked before the file may go).
CREATE INDEX mango_session_resources_file_idx
    ON mango_session_resources (file_id) WHERE file_id IS NOT NULL;
