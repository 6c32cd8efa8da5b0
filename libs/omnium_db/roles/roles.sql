-- Least-privilege database roles: one that owns the schema and runs the migrations, and one
-- per service with only the table privileges its named queries need. Applied (idempotent) after
-- the migrations by a superuser or the managed service's admin user, since it makes roles and
-- grants pg_monitor: `omnium_db.apply_roles(conn)` or psql's \i. Each role is
-- a group (NOLOGIN); each environment makes the login users that are members of one
-- (deploy/README.md#database-roles). tests/integration/test_roles.py runs every named query of
-- each service under its role, so a new query on a table not granted here fails a test.
-- A table not named here is open to the owner only (a new table: add the services' grants).

DO $roles$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['omnium_migrator', 'omnium_command', 'omnium_imports', 'omnium_scoring',
                           'omnium_delivery', 'omnium_gateway', 'omnium_admin'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('CREATE ROLE %I NOLOGIN', r);
    END IF;
  END LOOP;
END
$roles$;

-- The migrator owns the schema, so it may create, alter and grant on what it made.
ALTER SCHEMA public OWNER TO omnium_migrator;
GRANT CREATE, USAGE ON SCHEMA public TO omnium_migrator;
GRANT USAGE ON SCHEMA public
  TO omnium_command, omnium_imports, omnium_scoring, omnium_delivery, omnium_gateway, omnium_admin;
-- Nothing by default: each service's grants below are all it has on our tables.
REVOKE ALL ON ALL TABLES IN SCHEMA public
  FROM omnium_command, omnium_imports, omnium_scoring, omnium_delivery, omnium_gateway, omnium_admin;

-- command: the one road writes units, their competitors, actions, medals, the timeline and the
-- outbox; reads callers' sessions.
GRANT SELECT ON account TO omnium_command;
GRANT SELECT ON account_session TO omnium_command;
GRANT SELECT, INSERT ON command TO omnium_command;
-- A repeat reads its first answer FOR KEY SHARE (so its commit waits for the synchronous
-- standby), which PostgreSQL allows only with UPDATE on some column: this one, never written.
GRANT UPDATE (command_id) ON command TO omnium_command;
GRANT SELECT, UPDATE ON competitor TO omnium_command;
GRANT SELECT ON discipline TO omnium_command;
GRANT SELECT, INSERT, UPDATE ON domain_event TO omnium_command;
GRANT SELECT ON event TO omnium_command;
GRANT SELECT ON integration TO omnium_command;
GRANT SELECT, INSERT, UPDATE ON integration_key_state TO omnium_command;
GRANT INSERT ON integration_row TO omnium_command;
GRANT SELECT, UPDATE ON integration_run TO omnium_command;
GRANT SELECT, INSERT, UPDATE ON match_action TO omnium_command;
GRANT SELECT, INSERT, UPDATE ON medal_row TO omnium_command;
GRANT SELECT, INSERT ON timeline_item TO omnium_command;
GRANT SELECT, INSERT, UPDATE ON unit TO omnium_command;
GRANT SELECT, INSERT, UPDATE ON unit_competitor TO omnium_command;

-- imports: the import queue, runs, rows, key state, review items and alerts; integrations
-- and reference data loaded from files; reads what the road wrote to skip what did not change.
GRANT SELECT ON account TO omnium_imports;
GRANT SELECT ON account_session TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON alert TO omnium_imports;
GRANT SELECT, INSERT ON competitor TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON discipline TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON event TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON integration TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON integration_job TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON integration_key_state TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON integration_lookup TO omnium_imports;
GRANT SELECT, INSERT, DELETE ON integration_row TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON integration_run TO omnium_imports;
GRANT SELECT, INSERT ON integration_version TO omnium_imports;
GRANT SELECT ON medal_row TO omnium_imports;
GRANT SELECT, INSERT, UPDATE ON review_item TO omnium_imports;
GRANT SELECT ON timeline_item TO omnium_imports;
GRANT SELECT ON unit TO omnium_imports;
GRANT SELECT ON unit_competitor TO omnium_imports;

-- scoring: providers and their messages, scorer assignments and refusals; reads the matches
-- it scores and their actions.
GRANT SELECT ON account TO omnium_scoring;
GRANT SELECT ON account_session TO omnium_scoring;
GRANT SELECT ON competitor TO omnium_scoring;
GRANT SELECT ON discipline TO omnium_scoring;
GRANT SELECT ON domain_event TO omnium_scoring;
GRANT SELECT ON event TO omnium_scoring;
GRANT SELECT ON match_action TO omnium_scoring;
-- A resent tap is confirmed FOR KEY SHARE (its commit waits for the standby): UPDATE on one
-- column, as PostgreSQL asks of a row lock; scoring writes no action itself.
GRANT UPDATE (command_id) ON match_action TO omnium_scoring;
GRANT SELECT, INSERT, UPDATE ON provider TO omnium_scoring;
GRANT SELECT, INSERT, UPDATE ON provider_message TO omnium_scoring;
GRANT SELECT, INSERT, DELETE ON scorer_assignment TO omnium_scoring;
GRANT SELECT, INSERT ON scorer_refusal TO omnium_scoring;
GRANT SELECT ON unit TO omnium_scoring;
GRANT SELECT ON unit_competitor TO omnium_scoring;

-- delivery: clients, their feeds, sends, cursors and alerts; reads the outbox and what the
-- feeds carry.
GRANT SELECT, INSERT, UPDATE ON client TO omnium_delivery;
GRANT SELECT, INSERT, UPDATE, DELETE ON client_feed TO omnium_delivery;
GRANT SELECT ON competitor TO omnium_delivery;
GRANT SELECT, INSERT, UPDATE ON delivery_alert TO omnium_delivery;
GRANT SELECT, INSERT, DELETE ON delivery_attempt TO omnium_delivery;
GRANT SELECT, UPDATE ON delivery_cursor TO omnium_delivery;
GRANT SELECT ON discipline TO omnium_delivery;
GRANT SELECT ON domain_event TO omnium_delivery;
GRANT SELECT ON event TO omnium_delivery;
GRANT SELECT ON medal_row TO omnium_delivery;
GRANT SELECT ON unit TO omnium_delivery;
GRANT SELECT ON unit_competitor TO omnium_delivery;

-- gateway: public reads and the outbox's invalidations; scorers' sign-in, sessions and API
-- keys (accounts).
GRANT SELECT, INSERT, UPDATE ON account TO omnium_gateway;
GRANT SELECT, INSERT ON account_change TO omnium_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON account_session TO omnium_gateway;
GRANT SELECT, INSERT, UPDATE ON api_key TO omnium_gateway;
GRANT SELECT ON client TO omnium_gateway;
GRANT SELECT ON competitor TO omnium_gateway;
GRANT SELECT ON discipline TO omnium_gateway;
GRANT SELECT ON domain_event TO omnium_gateway;
GRANT SELECT ON event TO omnium_gateway;
GRANT SELECT ON medal_row TO omnium_gateway;
GRANT SELECT, INSERT, DELETE ON scorer_assignment TO omnium_gateway;
GRANT SELECT ON scorer_refusal TO omnium_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON sign_in_throttle TO omnium_gateway;
GRANT SELECT ON unit TO omnium_gateway;
GRANT SELECT ON unit_competitor TO omnium_gateway;

-- admin: accounts, sessions, API keys and scorer assignments; reads units, the timeline,
-- runs and review items (its other writes go through command and imports).
GRANT SELECT, INSERT, UPDATE ON account TO omnium_admin;
GRANT SELECT, INSERT ON account_change TO omnium_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON account_session TO omnium_admin;
GRANT SELECT, INSERT, UPDATE ON api_key TO omnium_admin;
GRANT SELECT ON competitor TO omnium_admin;
GRANT SELECT ON discipline TO omnium_admin;
GRANT SELECT ON event TO omnium_admin;
GRANT SELECT ON integration TO omnium_admin;
GRANT SELECT ON integration_lookup TO omnium_admin;
GRANT SELECT ON integration_row TO omnium_admin;
GRANT SELECT ON review_item TO omnium_admin;
GRANT SELECT, INSERT, DELETE ON scorer_assignment TO omnium_admin;
GRANT SELECT ON scorer_refusal TO omnium_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON sign_in_throttle TO omnium_admin;
GRANT SELECT ON timeline_item TO omnium_admin;
GRANT SELECT ON unit TO omnium_admin;
GRANT SELECT ON unit_competitor TO omnium_admin;

-- Every service checks the schema's version at start-up (omnium_db.require_schema).
GRANT SELECT ON schema_version
  TO omnium_command, omnium_imports, omnium_scoring, omnium_delivery, omnium_gateway, omnium_admin;

-- What EXPLAIN does not see, given by hand. change_seq numbers every change: the columns'
-- DEFAULT nextval('change_seq') and the writes that set changed_seq need it, and imports' fast
-- path reads its last value. Identity columns need no grant on their sequences.
GRANT USAGE, SELECT ON SEQUENCE change_seq
  TO omnium_command, omnium_imports, omnium_scoring, omnium_delivery, omnium_gateway, omnium_admin;
-- client_checker_changed (0021), a trigger, tells the outbox when a client's checker changes,
-- with the privileges of whoever changed the client: delivery, which loads its clients.
GRANT SELECT ON event TO omnium_delivery;
GRANT INSERT ON domain_event TO omnium_delivery;
-- The provider door the gateway mounts reads push providers' key hashes (PUSH_KEYS_SQL).
GRANT SELECT ON provider TO omnium_gateway;

-- The standby watch reads pg_stat_replication.sync_state, which PostgreSQL shows only to
-- pg_read_all_stats (in pg_monitor); without it the watch counts no standby, ever.
GRANT pg_monitor TO omnium_command;
-- Imports' fast path reads other sessions' xact_start in pg_stat_activity (keystate.sql
-- look_now); hidden from it, it falls back to a fixed window (fastpath_blind_seconds).
GRANT pg_read_all_stats TO omnium_imports;
