-- depends: 0022.journal_at_commit
-- Files whose bytes' type was never read (completed before type detection, or whose read failed at completion):
-- the cleanup reads them once, in id order ('' records "read, nothing recognised").
CREATE INDEX files_untyped ON files (id) WHERE detected_type IS NULL AND upload_state = 'complete'
  AND deleted_at IS NULL;
