-- depends: 0024.metadata_stripped
-- Quotas: what one principal may hold. A principal's own limits (set by a manage token or `lethe quota set`), as
-- a JSON document: max_bytes and max_files for all of its files, and per purpose; a limit left out is the
-- installation's default (quotas.default_bytes, quotas.default_files), a null one is no limit.
CREATE TABLE quotas (
    principal_id uuid PRIMARY KEY,
    limits       jsonb NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- What each principal holds, per purpose and in all (purpose '*'), kept by the triggers below in the transaction
-- of every change to a file's row: an upload in progress reserves its declared size; a complete file that is not
-- blocked uses its size until its row is removed (the purge's commit, so a deleted file still in its delay, or
-- held, still counts); a failed or blocked file holds nothing. No path that changes a file can forget to count
-- it, and a change holds its principal's '*' row locked until it commits: the check of a new upload against
-- its quota, made after its rows are written, reads totals no other transaction can move.
CREATE TABLE principal_usage (
    principal_id   uuid NOT NULL,
    purpose        text NOT NULL,
    reserved_bytes bigint NOT NULL DEFAULT 0,
    reserved_files bigint NOT NULL DEFAULT 0,
    used_bytes     bigint NOT NULL DEFAULT 0,
    used_files     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (principal_id, purpose)
);

-- The charge of one file row: 'reserved', 'used' or NULL (nothing).
CREATE FUNCTION file_charge(upload_state text, scan_status text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN upload_state = 'uploading' THEN 'reserved'
        WHEN upload_state = 'complete' AND scan_status NOT IN ('infected', 'error') THEN 'used'
    END
$$;

-- One change of charge added to a principal's usage, in all ('*', first: every transaction locks a principal's
-- rows in one order) and for the purpose (negative sizes take it off).
CREATE FUNCTION principal_usage_add(principal uuid, file_purpose text, charge text, size bigint, files bigint)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO principal_usage AS u (principal_id, purpose, reserved_bytes, reserved_files, used_bytes, used_files)
    SELECT principal, p,
           CASE WHEN charge = 'reserved' THEN size ELSE 0 END, CASE WHEN charge = 'reserved' THEN files ELSE 0 END,
           CASE WHEN charge = 'used' THEN size ELSE 0 END, CASE WHEN charge = 'used' THEN files ELSE 0 END
    FROM unnest(ARRAY['*', file_purpose]) AS p
    ON CONFLICT (principal_id, purpose) DO UPDATE SET
        reserved_bytes = u.reserved_bytes + excluded.reserved_bytes,
        reserved_files = u.reserved_files + excluded.reserved_files,
        used_bytes = u.used_bytes + excluded.used_bytes,
        used_files = u.used_files + excluded.used_files
$$;

-- A row changed in what it is charged (a row at a time: the WHEN of its trigger leaves every other update, such as
-- a delete's mark, without a call): its old charge taken off, its new one put on.
CREATE FUNCTION principal_usage_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    charge_before text := file_charge(OLD.upload_state, OLD.scan_status);
    charge_after text := file_charge(NEW.upload_state, NEW.scan_status);
BEGIN
    IF charge_before IS NOT DISTINCT FROM charge_after AND OLD.size_bytes = NEW.size_bytes
       AND OLD.uploaded_by = NEW.uploaded_by AND OLD.purpose = NEW.purpose THEN
        RETURN NULL;
    END IF;
    IF charge_before IS NOT NULL THEN
        PERFORM principal_usage_add(OLD.uploaded_by, OLD.purpose, charge_before, -OLD.size_bytes, -1);
    END IF;
    IF charge_after IS NOT NULL THEN
        PERFORM principal_usage_add(NEW.uploaded_by, NEW.purpose, charge_after, NEW.size_bytes, 1);
    END IF;
    RETURN NULL;
END
$$;

-- Rows inserted or removed, a statement at a time (a purge's commit, a cleanup's removal of failed rows, a bulk
-- load): one change per principal and purpose, and per principal in all, for the whole statement, in one order
-- ('*' sorts first, as above).
CREATE FUNCTION principal_usage_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO principal_usage AS u (principal_id, purpose, reserved_bytes, reserved_files, used_bytes, used_files)
        SELECT uploaded_by, p,
               coalesce(sum(size_bytes) FILTER (WHERE file_charge(upload_state, scan_status) = 'reserved'), 0),
               count(*) FILTER (WHERE file_charge(upload_state, scan_status) = 'reserved'),
               coalesce(sum(size_bytes) FILTER (WHERE file_charge(upload_state, scan_status) = 'used'), 0),
               count(*) FILTER (WHERE file_charge(upload_state, scan_status) = 'used')
        FROM added CROSS JOIN LATERAL unnest(ARRAY['*', purpose]) AS p
        WHERE file_charge(upload_state, scan_status) IS NOT NULL
        GROUP BY uploaded_by, p
        ORDER BY uploaded_by, p COLLATE "C"
        ON CONFLICT (principal_id, purpose) DO UPDATE SET
            reserved_bytes = u.reserved_bytes + excluded.reserved_bytes,
            reserved_files = u.reserved_files + excluded.reserved_files,
            used_bytes = u.used_bytes + excluded.used_bytes,
            used_files = u.used_files + excluded.used_files;
    ELSE
        INSERT INTO principal_usage AS u (principal_id, purpose, reserved_bytes, reserved_files, used_bytes, used_files)
        SELECT uploaded_by, p,
               -coalesce(sum(size_bytes) FILTER (WHERE file_charge(upload_state, scan_status) = 'reserved'), 0),
               -count(*) FILTER (WHERE file_charge(upload_state, scan_status) = 'reserved'),
               -coalesce(sum(size_bytes) FILTER (WHERE file_charge(upload_state, scan_status) = 'used'), 0),
               -count(*) FILTER (WHERE file_charge(upload_state, scan_status) = 'used')
        FROM gone CROSS JOIN LATERAL unnest(ARRAY['*', purpose]) AS p
        WHERE file_charge(upload_state, scan_status) IS NOT NULL
        GROUP BY uploaded_by, p
        ORDER BY uploaded_by, p COLLATE "C"
        ON CONFLICT (principal_id, purpose) DO UPDATE SET
            reserved_bytes = u.reserved_bytes + excluded.reserved_bytes,
            reserved_files = u.reserved_files + excluded.reserved_files,
            used_bytes = u.used_bytes + excluded.used_bytes,
            used_files = u.used_files + excluded.used_files;
    END IF;
    RETURN NULL;
END
$$;

-- The triggers first: they lock the table against writers until this migration commits, so the count below
-- and every change after it are each counted once.
CREATE TRIGGER files_usage_insert AFTER INSERT ON files
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION principal_usage_rows();
CREATE TRIGGER files_usage_update AFTER UPDATE OF upload_state, scan_status, size_bytes, uploaded_by, purpose ON files
    FOR EACH ROW
    WHEN (OLD.upload_state IS DISTINCT FROM NEW.upload_state OR OLD.scan_status IS DISTINCT FROM NEW.scan_status
          OR OLD.size_bytes IS DISTINCT FROM NEW.size_bytes OR OLD.uploaded_by IS DISTINCT FROM NEW.uploaded_by
          OR OLD.purpose IS DISTINCT FROM NEW.purpose)
    EXECUTE FUNCTION principal_usage_row();
CREATE TRIGGER files_usage_delete AFTER DELETE ON files
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION principal_usage_rows();

INSERT INTO principal_usage (principal_id, purpose, reserved_bytes, reserved_files, used_bytes, used_files)
SELECT uploaded_by, p,
       coalesce(sum(size_bytes) FILTER (WHERE file_charge(upload_state, scan_status) = 'reserved'), 0),
       count(*) FILTER (WHERE file_charge(upload_state, scan_status) = 'reserved'),
       coalesce(sum(size_bytes) FILTER (WHERE file_charge(upload_state, scan_status) = 'used'), 0),
       count(*) FILTER (WHERE file_charge(upload_state, scan_status) = 'used')
FROM files CROSS JOIN LATERAL unnest(ARRAY['*', purpose]) AS p
GROUP BY uploaded_by, p;
