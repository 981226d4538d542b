DROP TABLE receipts;
ALTER TABLE files DROP COLUMN deleted_via;
