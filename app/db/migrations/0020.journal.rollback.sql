DROP TABLE IF EXISTS journal_pending;
DROP TABLE IF EXISTS journal_state;
