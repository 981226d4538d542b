DROP INDEX messages_tombstones;
