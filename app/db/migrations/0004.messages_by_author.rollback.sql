-- Fails when two authors share a message id: such data cannot go back to global ids.
ALTER TABLE attachments DROP CONSTRAINT attachments_message_fkey;
ALTER TABLE attachments DROP CONSTRAINT attachments_pkey;
ALTER TABLE messages DROP CONSTRAINT messages_pkey;
ALTER TABLE messages ADD CONSTRAINT messages_pkey PRIMARY KEY (id);
ALTER TABLE attachments ADD CONSTRAINT attachments_pkey PRIMARY KEY (message_id, file_id);
ALTER TABLE attachments ADD CONSTRAINT attachments_message_id_fkey
    FOREIGN KEY (message_id) REFERENCES messages (id) ON DELETE CASCADE;
ALTER TABLE attachments DROP COLUMN author_id;
