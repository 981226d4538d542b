-- The code before this migration limits a file's size alone: quotas and the usage counted for them go.
DROP TRIGGER IF EXISTS files_usage_insert ON files;
DROP TRIGGER IF EXISTS files_usage_update ON files;
DROP TRIGGER IF EXISTS files_usage_delete ON files;
DROP FUNCTION IF EXISTS principal_usage_rows();
DROP FUNCTION IF EXISTS principal_usage_row();
DROP FUNCTION IF EXISTS principal_usage_add(uuid, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS file_charge(text, text);
DROP TABLE IF EXISTS principal_usage;
DROP TABLE IF EXISTS quotas;
