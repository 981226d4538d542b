-- depends: 0017.holders
-- Serving: the type detected from a file's first bytes at completion (inline display trusts it, never the
-- declared one), when its content was completed (Last-Modified), and the index listFiles pages by.
ALTER TABLE files ADD COLUMN detected_type text, ADD COLUMN completed_at timestamptz;
UPDATE files f SET completed_at = coalesce(s.completed_at, f.created_at)
FROM upload_sessions s WHERE s.file_id = f.id AND f.upload_state = 'complete';
UPDATE files SET completed_at = created_at WHERE upload_state = 'complete' AND completed_at IS NULL;
CREATE INDEX files_by_uploader ON files (uploaded_by, created_at DESC, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX files_listed ON files (created_at DESC, id DESC) WHERE deleted_at IS NULL;
