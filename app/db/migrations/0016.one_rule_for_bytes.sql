-- depends: 0015.webhooks
-- One rule for bytes. The point of no return of a file's removal is recorded on its row (removal_begun_at),
-- written with the clearance that judged the file free, under a lock that placing a hold takes exclusively: a
-- hold placed afterwards can no longer keep those bytes, and says so (files_lost), as does the receipt.
ALTER TABLE files ADD COLUMN removal_begun_at timestamptz;

ALTER TABLE receipts ADD COLUMN removal_began_at timestamptz,
    ADD COLUMN hold_too_late boolean NOT NULL DEFAULT false;

-- A hold counts what it keeps (files_deferred: live while it is active, fixed at its release) and what was past
-- the point of no return when it was placed (files_lost: fixed at its placement, since no removal of a file it
-- covers begins after it). A released hold forgets the person it named
-- once that person's erasure completes (subject_forgotten_at): ids, times and counts stay.
ALTER TABLE legal_holds ADD COLUMN files_lost integer NOT NULL DEFAULT 0 CHECK (files_lost >= 0),
    ADD COLUMN subject_forgotten_at timestamptz,
    DROP CONSTRAINT legal_holds_check,
    ADD CONSTRAINT legal_holds_target CHECK (
        ((subject_id IS NULL) <> (file_id IS NULL) AND subject_forgotten_at IS NULL)
        OR (subject_id IS NULL AND file_id IS NULL AND subject_forgotten_at IS NOT NULL AND released_at IS NOT NULL));

-- One attempt of a delivery at a time: an attempt leases its delivery until about webhooks.timeout from its
-- start, and neither another job nor the cleanup's catch-up sends it while the lease runs.
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;
