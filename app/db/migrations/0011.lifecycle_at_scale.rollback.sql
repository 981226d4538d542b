DROP INDEX events_actor;
