-- The code before this migration sends no lifecycle messages: those not yet delivered are dropped (the files'
-- states stay readable through the API), and the types narrow again.
DELETE FROM webhook_deliveries WHERE event_type IN ('file.ready', 'file.blocked', 'file.failed', 'file.variants_ready');
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_type_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_type_check CHECK (event_type IN (
    'file.purged', 'erasure.completed', 'hold.placed', 'hold.released'));
