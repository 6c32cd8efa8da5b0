-- Scorers are assigned (issue 20): a scorer account scores only its matches, given to it one
-- by one or as a venue and a day; and the actions refused because a match was not theirs.

-- One assignment: an account and a unit, or an account and a venue on one day (the day as the
-- event's own calendar has it). A unit that has assignments of its own is scored by those
-- accounts only; its venue and day's assignments count only for units with none of their own,
-- so handing one match of a venue's day to another scorer is one row.
CREATE TABLE scorer_assignment (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id  uuid NOT NULL REFERENCES account (id) ON DELETE CASCADE,
  event_id    uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  unit_id     uuid REFERENCES unit (id) ON DELETE CASCADE,
  venue       text,
  day         date,
  assigned_by text NOT NULL,
  assigned_at timestamptz NOT NULL DEFAULT now(),
  CHECK ((unit_id IS NOT NULL AND venue IS NULL AND day IS NULL)
         OR (unit_id IS NULL AND venue IS NOT NULL AND day IS NOT NULL))
);
CREATE UNIQUE INDEX scorer_assignment_of_unit ON scorer_assignment (unit_id, account_id)
  WHERE unit_id IS NOT NULL;
CREATE UNIQUE INDEX scorer_assignment_of_venue_day
  ON scorer_assignment (event_id, venue, day, account_id) WHERE unit_id IS NULL;
CREATE INDEX scorer_assignment_by_account ON scorer_assignment (account_id);

-- The accounts that may score a unit: its own assignments, or else its venue and day's.
CREATE FUNCTION unit_scorers(p_unit uuid) RETURNS TABLE (account_id uuid)
LANGUAGE sql STABLE AS $$
  SELECT s.account_id FROM scorer_assignment s WHERE s.unit_id = p_unit
  UNION ALL
  SELECT s.account_id
    FROM unit u
    JOIN event e ON e.id = u.event_id
    JOIN scorer_assignment s
      ON s.unit_id IS NULL AND s.event_id = u.event_id AND s.venue = u.venue
     AND s.day = (u.start_at AT TIME ZONE e.time_zone)::date
   WHERE u.id = p_unit
     AND NOT EXISTS (SELECT 1 FROM scorer_assignment x WHERE x.unit_id = p_unit)
$$;

-- Scoring copies keep who may score what for a while; any change tells them to read again.
CREATE FUNCTION notify_scorer_assignment() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('omnium_scorer_assignment', '');
  RETURN NULL;
END
$$;
CREATE TRIGGER scorer_assignment_changed
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON scorer_assignment
  FOR EACH STATEMENT EXECUTE FUNCTION notify_scorer_assignment();
CREATE TRIGGER account_role_changed
  AFTER UPDATE OF role, disabled ON account
  FOR EACH STATEMENT EXECUTE FUNCTION notify_scorer_assignment();

-- An action refused because its match is not the scorer's: what an operator looks at when a
-- device scores the wrong match (a lost tablet, a match handed over). Once per client id.
CREATE TABLE scorer_refusal (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  client_id  text NOT NULL UNIQUE,
  unit_id    uuid REFERENCES unit (id) ON DELETE CASCADE,
  account_id uuid REFERENCES account (id) ON DELETE SET NULL,
  actor_name text NOT NULL,
  screen     text,
  kind       text NOT NULL,
  reason     text NOT NULL,
  refused_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX scorer_refusal_by_unit ON scorer_refusal (unit_id, id DESC);
