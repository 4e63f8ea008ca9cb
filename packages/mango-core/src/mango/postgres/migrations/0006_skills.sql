-- mango 0006: Custom Skills, their immutable versions, and a Session's pins.
--
-- A skill is a name, unique in the deployment's database. Each version is
-- one canonical zip archive in the Files store (blob_key, content-addressed
-- by its SHA-256, so equal archives share a blob), with the size and digest
-- the archive must have and what it expands to. Versions are immutable and
-- numbered from 1 per skill. The archive is written before its row, so a
-- row always names a complete blob.
--
-- A Session pins versions when it is created (in the same transaction as
-- its row); at most one version per skill. A pinned version cannot go while
-- a Session pins it, nor a Session while it has pins (no cascades, as in 0001).

CREATE TABLE mango_skills (
    id         text        PRIMARY KEY CHECK (id ~ '^skill-[0-9a-f]{32}$'),
    name       text        NOT NULL CHECK (name ~ '^[a-z0-9-]{1,64}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT mango_skills_name_key UNIQUE (name)
);

CREATE TABLE mango_skill_versions (
    skill_id            text        NOT NULL REFERENCES mango_skills (id),
    version             integer     NOT NULL CHECK (version >= 1),
    description         text        NOT NULL DEFAULT ''
                                    CHECK (octet_length(description) <= 1024),
    blob_key            text        NOT NULL CHECK (length(blob_key) BETWEEN 1 AND 1024),
    size_bytes          bigint      NOT NULL CHECK (size_bytes >= 0 AND size_bytes < 30000000),
    checksum_sha256     text        NOT NULL CHECK (checksum_sha256 ~ '^[0-9a-f]{64}$'),
    expanded_size_bytes bigint      NOT NULL
                                    CHECK (expanded_size_bytes >= 0 AND expanded_size_bytes < 30000000),
    file_count          integer     NOT NULL CHECK (file_count BETWEEN 1 AND 1000),
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (skill_id, version)
);

CREATE TABLE mango_session_skills (
    session_id    text    NOT NULL REFERENCES mango_sessions (id),
    position      integer NOT NULL CHECK (position >= 0),
    skill_id      text    NOT NULL,
    skill_version integer NOT NULL,
    PRIMARY KEY (session_id, position),
    CONSTRAINT mango_session_skills_skill_key UNIQUE (session_id, skill_id),
    CONSTRAINT mango_session_skills_version_fkey FOREIGN KEY (skill_id, skill_version)
        REFERENCES mango_skill_versions (skill_id, version) ON DELETE RESTRICT
);

-- Which Sessions pin a version (checked before a version may go).
CREATE INDEX mango_session_skills_version_idx ON mango_session_skills (skill_id, skill_version);
