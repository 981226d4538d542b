-- depends: 0027.stores
-- The operator console. A sign-in link (lethe console) is a random token shown once; only its SHA-256 is kept,
-- until it is used (the row goes: a link works once) or expires. A session is the same: a random cookie value,
-- its SHA-256 here, a principal with `manage`, an expiry and the token its forms carry (CSRF). Expired rows go
-- at the next sign-in. Neither holds anything of a file.
CREATE TABLE console_grants (
    token_sha256 bytea PRIMARY KEY,
    principal_id uuid NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE TABLE console_sessions (
    token_sha256 bytea PRIMARY KEY,
    principal_id uuid NOT NULL,
    csrf         text NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
-- What the last cleanup run found and did, step by step (the console's backlog per step): one row a step,
-- replaced by each run that is not a dry run. Counts only.
CREATE TABLE cleanup_steps (
    step       text PRIMARY KEY,
    name       text NOT NULL,
    ran_at     timestamptz NOT NULL,
    candidates integer NOT NULL,
    acted      integer NOT NULL,
    kept       integer NOT NULL,
    failed     integer NOT NULL,
    error      text,
    duration_s double precision NOT NULL
);
