-- Wake the planner's worker when an intent or an operator command is committed (NOTIFY is
-- transactional: the worker hears it only once the row can be claimed). Without it a new
-- intent waited up to worker_poll_s for the worker's next pass (issue 27, item 3: intent in to
-- rollout.planned out); the poll stays as the level-triggered net behind the wake.
CREATE FUNCTION planner_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_planner', '');
    RETURN NULL;
END $$;
CREATE TRIGGER intents_wake AFTER INSERT ON intents
    FOR EACH STATEMENT EXECUTE FUNCTION planner_wake();
CREATE TRIGGER commands_wake AFTER INSERT ON commands
    FOR EACH STATEMENT EXECUTE FUNCTION planner_wake();
