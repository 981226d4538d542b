ALTER TABLE erasures DROP CONSTRAINT erasures_running_names_subject;
ALTER TABLE erasures ADD CHECK (state = 'complete' OR subject_id IS NOT NULL);
DROP INDEX erasures_subject;
DROP INDEX files_objects_due;
DROP INDEX files_scan_pending;
ALTER TABLE files DROP COLUMN objects_purged_at;
ALTER TABLE files DROP COLUMN scan_resent_at;
