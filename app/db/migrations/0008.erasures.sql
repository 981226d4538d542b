-- depends: 0007.slots
-- D16 erasure of a person. An erasure keeps its subject only while it runs: when it completes subject_id
-- becomes NULL, so nothing of the subject survives in it (its receipts are name-free). erasure_files lists
-- the subject's files (ids and the stored key of the original, nothing else) so that, after their rows are
-- purged, a read of the store can confirm every key absent.
CREATE TABLE erasures (
    id                     uuid PRIMARY KEY,
    subject_id             uuid,
    state                  text NOT NULL CHECK (state IN ('running', 'complete', 'failed')),
    reason                 text CHECK (reason ~ '^[a-z_]{1,64}$'),
    created_at             timestamptz NOT NULL,
    finished_at            timestamptz,
    files_marked           integer NOT NULL DEFAULT 0,
    files_purged           integer NOT NULL DEFAULT 0,
    keys_confirmed_absent  integer NOT NULL DEFAULT 0,
    messages_removed       integer NOT NULL DEFAULT 0,
    drafts_removed         integer NOT NULL DEFAULT 0,
    CHECK ((state = 'running') = (finished_at IS NULL)),
    CHECK (state <> 'complete' OR subject_id IS NULL),
    CHECK (state = 'complete' OR subject_id IS NOT NULL)
);

-- One running erasure per subject: a second request answers the running one.
CREATE UNIQUE INDEX erasures_one_running ON erasures (subject_id) WHERE state = 'running';

CREATE TABLE erasure_files (
    erasure_id     uuid NOT NULL REFERENCES erasures (id) ON DELETE CASCADE,
    file_id        uuid NOT NULL,
    object_key     text,
    part_count     integer NOT NULL DEFAULT 0 CHECK (part_count >= 0),
    confirmed_at   timestamptz,
    keys_absent    integer CHECK (keys_absent >= 0),
    PRIMARY KEY (erasure_id, file_id)
);
