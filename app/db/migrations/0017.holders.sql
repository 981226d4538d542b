-- depends: 0016.one_rule_for_bytes
-- A PATCH's write hold and a completion's claim name the process that holds them, so that a restart of
-- `lethe dev` frees at once what its own dead process held (a Ctrl-C in the middle of an upload), instead of
-- leaving the client 409 until file.write_timeout or file.complete_timeout ends it.
ALTER TABLE upload_sessions ADD COLUMN writing_by uuid, ADD COLUMN completing_by uuid;
