-- depends: 0029.traces
-- Lifecycle webhooks: a file's settling is sent as its end is (file.ready when it is deliverable, file.blocked,
-- file.failed with a reason word, file.variants_ready with the variants' names). The same rows, four types more.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_type_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_type_check CHECK (event_type IN (
    'file.ready', 'file.blocked', 'file.failed', 'file.variants_ready',
    'file.purged', 'erasure.completed', 'hold.placed', 'hold.released'));
