-- depends: 0023.untyped_files
-- Which metadata the stored original of a file no longer holds (image.strip_metadata: 'location' or 'all'),
-- recorded once the scan's first step read it; NULL: stored as uploaded (before this release, another format,
-- image.strip_metadata none, or bytes its reader could not follow). Inline display shows such an original itself.
ALTER TABLE files ADD COLUMN metadata_stripped text
  CHECK (metadata_stripped IS NULL OR metadata_stripped IN ('location', 'all'));
-- The size the uploader declared and sent, kept once the stored original is smaller: a tus client that asks again
-- after the scan is told the length it sent, as the upload was.
ALTER TABLE files ADD COLUMN size_as_sent bigint CHECK (size_as_sent IS NULL OR size_as_sent >= 0);
