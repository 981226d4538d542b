"""What users put in: uploads, files, attachments, drafts, events, scan (STYLE.md, "When app/ grows")."""
