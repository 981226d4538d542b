-- depends: 0002.purge_failures
-- A completion claims its upload in a short transaction before it assembles the object, so that no second
-- complete, abort or part upload interleaves with it (uploads issue: a second complete destroyed a
-- finished upload). A claim older than file.complete_timeout may be taken over.
ALTER TABLE upload_sessions ADD COLUMN completing_since timestamptz;
