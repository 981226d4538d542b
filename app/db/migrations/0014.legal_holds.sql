-- depends: 0013.direct_uploads
-- Legal holds (D19): a hold on a subject (every file they uploaded) or on one file suspends the purge
-- of the files it covers, checked by the purge at execution and again under the row lock. Users see deletions as usual:
-- the file is marked deleted and its events redacted; only its objects and row wait. case_ref is a token (a
-- ticket number), never free text. A released hold stays as a name-free record (ids, times, a count) for
-- privacy.receipt_ttl; file_id is not a foreign key because the record outlives the file's row.
CREATE TABLE legal_holds (
    id              uuid PRIMARY KEY,
    subject_id      uuid,
    file_id         uuid,
    case_ref        text NOT NULL CHECK (case_ref ~ '^[A-Za-z0-9._-]{1,64}$'),
    created_at      timestamptz NOT NULL,
    released_at     timestamptz,
    files_deferred  integer CHECK (files_deferred >= 0),
    CHECK ((subject_id IS NULL) <> (file_id IS NULL)),
    CHECK ((released_at IS NULL) = (files_deferred IS NULL)),
    CHECK (released_at IS NULL OR released_at >= created_at)
);

-- The purge's check: the active holds of a file and of an uploader.
CREATE INDEX legal_holds_active_subject ON legal_holds (subject_id) WHERE released_at IS NULL AND subject_id IS NOT NULL;
CREATE INDEX legal_holds_active_file ON legal_holds (file_id) WHERE released_at IS NULL AND file_id IS NOT NULL;
-- The receipt of a file purged after a release reads the holds that covered it.
CREATE INDEX legal_holds_subject ON legal_holds (subject_id, released_at) WHERE subject_id IS NOT NULL;
CREATE INDEX legal_holds_file ON legal_holds (file_id, released_at) WHERE file_id IS NOT NULL;
-- The list (GET /api/v1/holds) and the cleanup's removal of released records past privacy.receipt_ttl.
CREATE INDEX legal_holds_listed ON legal_holds (created_at, id);
CREATE INDEX legal_holds_released ON legal_holds (released_at, id) WHERE released_at IS NOT NULL;

-- A subject hold's deleted files (its count, the files its release frees) without a visit of every file the
-- subject ever uploaded.
CREATE INDEX files_deleted_by_uploader ON files (uploaded_by, id) WHERE deleted_at IS NOT NULL;

-- A receipt records that a hold deferred the purge: the hold released last, and the deferral's start and end.
ALTER TABLE receipts ADD COLUMN deferred_by_hold uuid, ADD COLUMN deferred_from timestamptz,
    ADD COLUMN deferred_until timestamptz,
    ADD CONSTRAINT receipts_deferral CHECK ((deferred_by_hold IS NULL) = (deferred_from IS NULL)
                                            AND (deferred_from IS NULL) = (deferred_until IS NULL)
                                            AND (deferred_from IS NULL OR deferred_until >= deferred_from));
