-- depends: 0003.complete_claim
-- Message ids are the application's, scoped by their author: two users may use the same id, and no user
-- can claim, block or probe another's (docs/decisions.md, "Message ids are scoped by author").
ALTER TABLE attachments ADD COLUMN author_id uuid;
UPDATE attachments a SET author_id = m.author_id FROM messages m WHERE m.id = a.message_id;
ALTER TABLE attachments ALTER COLUMN author_id SET NOT NULL;
ALTER TABLE attachments DROP CONSTRAINT attachments_message_id_fkey;
ALTER TABLE attachments DROP CONSTRAINT attachments_pkey;
ALTER TABLE messages DROP CONSTRAINT messages_pkey;
ALTER TABLE messages ADD CONSTRAINT messages_pkey PRIMARY KEY (author_id, id);
ALTER TABLE attachments ADD CONSTRAINT attachments_pkey PRIMARY KEY (author_id, message_id, file_id);
ALTER TABLE attachments ADD CONSTRAINT attachments_message_fkey
    FOREIGN KEY (author_id, message_id) REFERENCES messages (author_id, id) ON DELETE CASCADE;
