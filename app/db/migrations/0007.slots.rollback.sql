DROP INDEX files_slot_candidates;
DROP TABLE slots;
