-- depends: 0014.legal_holds
-- Deletion webhooks (Standard Webhooks 1.0). One row per message and endpoint: its id is the
-- webhook-id (stable across attempts), the event type, the event's data (the receipt's fields, ids and counts:
-- nothing that names anyone) and when it happened, so that every attempt sends the same bytes; the attempts,
-- the last answer and the next try. No body beyond that. Rows go after webhooks.delivery_ttl (the cleanup).
CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY,
    endpoint         text NOT NULL CHECK (endpoint ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    event_type       text NOT NULL CHECK (event_type IN ('file.purged', 'erasure.completed', 'hold.placed',
                                                         'hold.released')),
    data             jsonb NOT NULL,
    occurred_at      timestamptz NOT NULL,
    state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed', 'disabled')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_status      integer,
    last_error       text CHECK (last_error ~ '^[a-z_]{1,32}$'),
    next_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)),
    CHECK ((state = 'pending') = (finished_at IS NULL))
);

-- The cleanup: pending deliveries whose job was lost (due long ago), the oldest undelivered, and old rows.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at, id);
CREATE INDEX webhook_deliveries_undelivered ON webhook_deliveries (created_at) WHERE state = 'pending';

-- An endpoint that answered 410 Gone: disabled until its configuration (fingerprint) changes.
CREATE TABLE webhook_endpoints_disabled (
    endpoint     text PRIMARY KEY,
    fingerprint  text NOT NULL,
    disabled_at  timestamptz NOT NULL
);
