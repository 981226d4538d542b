-- The code before this migration knows one store: it reads every file from the store it is configured with. A
-- rollback with files in a store other than default would lose them: move them back first (lethe stores migrate
-- --to default) and let the copies left behind go.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM files WHERE store <> 'default') OR EXISTS (SELECT 1 FROM store_copies) THEN
        RAISE EXCEPTION 'files lie in a store other than default, or copies wait for removal: '
            'run lethe stores migrate --to default and wait for lethe stores status to show no copies first';
    END IF;
END
$$;
ALTER TABLE receipts DROP COLUMN IF EXISTS stores;
DROP TABLE IF EXISTS store_move_failures;
DROP TABLE IF EXISTS store_migrations;
DROP TABLE IF EXISTS store_copies;
DROP INDEX IF EXISTS files_by_store;
ALTER TABLE files DROP COLUMN IF EXISTS store;
