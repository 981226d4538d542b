DROP TABLE IF EXISTS purge_failures;
