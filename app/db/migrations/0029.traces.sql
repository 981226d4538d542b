-- depends: 0028.console
-- Tracing: a job keeps the W3C traceparent of the span that committed it (NULL when tracing is off), so its
-- message, its actor and what the actor does join the trace of the request or job that asked for it. Ids only:
-- a trace id and a span id, never data.
ALTER TABLE outbox ADD COLUMN traceparent text;
