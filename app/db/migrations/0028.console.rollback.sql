-- The code before this migration has no console: its sessions, links and the last run's step counts go.
DROP TABLE IF EXISTS cleanup_steps;
DROP TABLE IF EXISTS console_sessions;
DROP TABLE IF EXISTS console_grants;
