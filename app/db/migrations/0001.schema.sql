-- Lethe schema (DESIGN.md D3). Every state column has a CHECK; files cascade to sessions and parts and are
-- restricted by attachments (a file is attached at most once). The partial indexes serve the candidate
-- queries of the cleanup (D8): each step reads its candidates by (time, id) through one of them.

CREATE TABLE files (
    id               uuid PRIMARY KEY,
    uploaded_by      uuid NOT NULL,
    purpose          text NOT NULL CHECK (purpose IN ('attachment', 'avatar', 'branding', 'gdpr_export')),
    original_name    text NOT NULL,
    mime_type        text NOT NULL,
    size_bytes       bigint NOT NULL CHECK (size_bytes >= 0),
    sha256           text CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    scope_id         uuid,
    object_key       text,
    upload_state     text NOT NULL DEFAULT 'uploading'
                     CHECK (upload_state IN ('uploading', 'complete', 'failed')),
    scan_status      text NOT NULL DEFAULT 'pending'
                     CHECK (scan_status IN ('pending', 'clean', 'infected', 'error', 'skipped')),
    created_at       timestamptz NOT NULL,
    scanned_at       timestamptz,
    deleted_at       timestamptz,
    -- The latest stored time of the file (D8 "ages"): created_at, the session's completed_at, scanned_at
    -- and expires_at of an expired session. Kept by the services on every change so that the cleanup
    -- candidate queries can use an index; docs/decisions.md says why it exists.
    last_change_at   timestamptz NOT NULL,
    CHECK (deleted_at IS NULL OR deleted_at >= created_at),
    CHECK (upload_state <> 'uploading' OR scan_status = 'pending')
);

CREATE INDEX files_uploaded_by ON files (uploaded_by, created_at);

-- D8 b: never attached, deliverable, not deleted.
CREATE INDEX files_unattached_candidates ON files (last_change_at, id)
    WHERE purpose = 'attachment' AND deleted_at IS NULL AND upload_state = 'complete'
      AND scan_status IN ('clean', 'skipped');

-- D8 c: failed or blocked, not deleted.
CREATE INDEX files_failed_candidates ON files (last_change_at, id)
    WHERE purpose = 'attachment' AND deleted_at IS NULL
      AND (upload_state = 'failed' OR (upload_state = 'complete' AND scan_status IN ('infected', 'error')));

-- D8 d and f: deleted rows, oldest mark first.
CREATE INDEX files_deleted ON files (deleted_at, id) WHERE deleted_at IS NOT NULL;

CREATE TABLE upload_sessions (
    file_id            uuid PRIMARY KEY REFERENCES files (id) ON DELETE CASCADE,
    state              text NOT NULL DEFAULT 'open'
                       CHECK (state IN ('open', 'completed', 'aborted', 'expired')),
    part_size          integer NOT NULL CHECK (part_size > 0),
    part_count         integer NOT NULL CHECK (part_count >= 0),
    storage_upload_id  text,
    expected_sha256    text CHECK (expected_sha256 ~ '^[0-9a-f]{64}$'),
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    completed_at       timestamptz,
    CHECK (state <> 'completed' OR completed_at IS NOT NULL)
);

-- D8 a: open sessions by expiry.
CREATE INDEX upload_sessions_open_expiry ON upload_sessions (expires_at, file_id) WHERE state = 'open';

CREATE TABLE upload_parts (
    file_id      uuid NOT NULL REFERENCES upload_sessions (file_id) ON DELETE CASCADE,
    part_number  integer NOT NULL CHECK (part_number >= 1),
    size_bytes   bigint NOT NULL CHECK (size_bytes >= 0),
    etag         text NOT NULL,
    received_at  timestamptz NOT NULL,
    PRIMARY KEY (file_id, part_number)
);

CREATE TABLE messages (
    id          text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9:_-]{1,128}$'),
    author_id   uuid NOT NULL,
    created_at  timestamptz NOT NULL,
    deleted_at  timestamptz
);

CREATE TABLE attachments (
    message_id   text NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    file_id      uuid NOT NULL REFERENCES files (id) ON DELETE RESTRICT,
    attached_at  timestamptz NOT NULL,
    PRIMARY KEY (message_id, file_id),
    CONSTRAINT attachments_file_once UNIQUE (file_id)
);

CREATE TABLE drafts (
    user_id     uuid NOT NULL,
    draft_key   text NOT NULL CHECK (draft_key ~ '^[A-Za-z0-9:_-]{1,128}$'),
    body        text NOT NULL DEFAULT '',
    file_ids    uuid[] NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (user_id, draft_key)
);

CREATE TABLE events (
    id                     bigserial PRIMARY KEY,
    resource_kind          text NOT NULL,
    resource_id            uuid NOT NULL,
    type                   text NOT NULL,
    schema_version         integer NOT NULL CHECK (schema_version >= 1),
    audience_principal_id  uuid NOT NULL,
    actor_id               uuid,
    payload                jsonb NOT NULL,
    created_at             timestamptz NOT NULL,
    redacted_at            timestamptz
);

CREATE INDEX events_resource ON events (resource_kind, resource_id);
CREATE INDEX events_audience ON events (audience_principal_id, id);

-- D9: jobs committed with a transaction, published after the commit, relayed when left behind.
CREATE TABLE outbox (
    id          bigserial PRIMARY KEY,
    queue_name  text NOT NULL,
    actor_name  text NOT NULL,
    args        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX outbox_created ON outbox (created_at, id);
