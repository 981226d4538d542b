-- depends: 0008.erasures
-- Every file reaches an end.
-- scan_resent_at: when the cleanup sent a pending scan again (once; past twice scan.pending_ttl the scan
--   ends as error and the file is purged).
-- objects_purged_at: when a purge removed the objects of a file that is final and not deliverable (failed,
--   infected, error). The catch-up (D8 d) purges every such row without it, whatever its purpose, so a lost
--   purge job never leaves bytes behind.
ALTER TABLE files ADD COLUMN scan_resent_at timestamptz;
ALTER TABLE files ADD COLUMN objects_purged_at timestamptz;

CREATE INDEX files_scan_pending ON files (last_change_at, id)
    WHERE deleted_at IS NULL AND upload_state = 'complete' AND scan_status = 'pending';

CREATE INDEX files_objects_due ON files (last_change_at, id)
    WHERE deleted_at IS NULL AND objects_purged_at IS NULL
      AND (upload_state = 'failed' OR scan_status IN ('infected', 'error'));

-- The erasure forgets its subject in every erasure of that person once one completes (a failed one too).
CREATE INDEX erasures_subject ON erasures (subject_id) WHERE subject_id IS NOT NULL;

-- A failed erasure may forget its subject too (when a later erasure of that person completes): only a running
-- erasure must name its subject. The 0008 CHECK had no name of its own; find it by its definition.
DO $$
DECLARE c text;
BEGIN
    SELECT conname INTO c FROM pg_constraint
    WHERE conrelid = 'erasures'::regclass AND contype = 'c'
      AND pg_get_constraintdef(oid) = 'CHECK (((state = ''complete''::text) OR (subject_id IS NOT NULL)))';
    EXECUTE format('ALTER TABLE erasures DROP CONSTRAINT %I', c);
END $$;
ALTER TABLE erasures ADD CONSTRAINT erasures_running_names_subject CHECK (state <> 'running' OR subject_id IS NOT NULL);
