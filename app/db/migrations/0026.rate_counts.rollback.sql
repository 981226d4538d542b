-- The code before this migration has no rate limits: their counts go.
DROP TABLE IF EXISTS rate_counts;
