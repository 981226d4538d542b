-- depends: 0025.quotas
-- Rate limits: requests counted per key (a principal, or a keyed hash of a client address; never a token) and
-- fixed window, shared by every api process. Unlogged: counts of the last minutes are not worth a write-ahead
-- log, and a crash that empties them only gives every client a fresh window. The cleanup removes ended windows.
CREATE UNLOGGED TABLE rate_counts (
    key          text NOT NULL,
    window_start timestamptz NOT NULL,
    hits         integer NOT NULL,
    PRIMARY KEY (key, window_start)
);
CREATE INDEX rate_counts_window ON rate_counts (window_start);
