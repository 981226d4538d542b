DROP TABLE IF EXISTS outbox, events, drafts, attachments, messages, upload_parts, upload_sessions, files;
