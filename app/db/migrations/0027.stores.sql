-- depends: 0026.rate_counts
-- Several stores (file.stores, file.store.primary). Every object of a file (its originals, variants, the parts
-- and tail of its upload) lies in one store, named on its row: the store it was created in, until a migration
-- moves the row. Files from before this release are in the store named default (the one configured then).
ALTER TABLE files ADD COLUMN store text NOT NULL DEFAULT 'default' CHECK (store ~ '^[a-z0-9][a-z0-9_.-]{0,62}$');
CREATE INDEX files_by_store ON files (store, id);

-- The other stores that may hold objects of a file: a copy being made by a migration (`copying`: the target may
-- hold part of it) and a copy left in the store a migration moved the file from (`left`: removed under the one
-- rule for bytes once remove_after has passed). A file's purge removes its objects from its own store and from
-- every store named here, so a file deleted while its copy runs ends up in neither store.
CREATE TABLE store_copies (
    file_id       uuid NOT NULL REFERENCES files (id) ON DELETE CASCADE,
    store         text NOT NULL,
    state         text NOT NULL CHECK (state IN ('copying', 'left')),
    since         timestamptz NOT NULL,
    remove_after  timestamptz,
    PRIMARY KEY (file_id, store),
    CHECK ((state = 'left') = (remove_after IS NOT NULL))
);
CREATE INDEX store_copies_due ON store_copies (remove_after, file_id) WHERE state = 'left';
CREATE INDEX store_copies_by_store ON store_copies (store, state);

-- A migration (lethe stores migrate): every file of its sources (NULL: every store but the target) moves to its
-- target, batch by batch, in worker jobs. At most one runs at a time.
CREATE TABLE store_migrations (
    id           uuid PRIMARY KEY,
    target       text NOT NULL,
    source       text,
    state        text NOT NULL CHECK (state IN ('running', 'done', 'stopped')),
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    files_moved  bigint NOT NULL DEFAULT 0,
    bytes_moved  bigint NOT NULL DEFAULT 0,
    copies_made  bigint NOT NULL DEFAULT 0,
    batches      bigint NOT NULL DEFAULT 0,
    CHECK (source IS DISTINCT FROM target)
);
CREATE UNIQUE INDEX store_migrations_one_running ON store_migrations ((true)) WHERE state = 'running';

-- A receipt names the stores its file's objects were removed from.
ALTER TABLE receipts ADD COLUMN stores text[] NOT NULL DEFAULT ARRAY['default'];

-- A file a migration could not copy (its source object missing, or a copy that did not read back the same): the
-- migration goes on without it and says how many; running it again tries them again.
CREATE TABLE store_move_failures (
    migration_id  uuid NOT NULL REFERENCES store_migrations (id) ON DELETE CASCADE,
    file_id       uuid NOT NULL,
    reason        text NOT NULL CHECK (reason ~ '^[a-z_]{1,32}$'),
    PRIMARY KEY (migration_id, file_id)
);
