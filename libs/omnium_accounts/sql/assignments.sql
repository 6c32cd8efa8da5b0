-- Which scorer scores which match (scorer_assignment), set on the console or from a CSV.

-- name: events
SELECT id::text AS id, code FROM event ORDER BY code;

-- name: scorer_logins
-- The accounts a schedule may name, by login: who they are and whether they may score.
SELECT id::text AS id, login, name, role, disabled FROM account WHERE login = ANY($1::text[]);

-- name: units_by_code
SELECT id::text AS id, code, name FROM unit WHERE event_id = $1::uuid AND code = ANY($2::text[]);

-- name: venue_days
-- Each venue of the event with the days its units start on (by the event's calendar).
SELECT u.venue, array_agg(DISTINCT (u.start_at AT TIME ZONE e.time_zone)::date) AS days
  FROM unit u JOIN event e ON e.id = u.event_id
 WHERE u.event_id = $1::uuid AND u.venue IS NOT NULL AND u.start_at IS NOT NULL
 GROUP BY u.venue;

-- name: clear_unit
-- A unit named again: the scorers given now replace its earlier ones.
DELETE FROM scorer_assignment WHERE unit_id = $1::uuid RETURNING account_id::text;

-- name: clear_venue_day
DELETE FROM scorer_assignment
 WHERE unit_id IS NULL AND event_id = :event_id::uuid AND venue = :venue AND day = :day
RETURNING account_id::text;

-- name: assign_unit
INSERT INTO scorer_assignment (account_id, event_id, unit_id, assigned_by)
VALUES (:account_id::uuid, :event_id::uuid, :unit_id::uuid, :assigned_by)
ON CONFLICT (unit_id, account_id) WHERE unit_id IS NOT NULL DO NOTHING;

-- name: assign_venue_day
INSERT INTO scorer_assignment (account_id, event_id, venue, day, assigned_by)
VALUES (:account_id::uuid, :event_id::uuid, :venue, :day, :assigned_by)
ON CONFLICT (event_id, venue, day, account_id) WHERE unit_id IS NULL DO NOTHING;

-- name: remove_assignment
DELETE FROM scorer_assignment s
 USING account a
 WHERE s.id = $1 AND a.id = s.account_id
RETURNING a.login, s.venue, s.day, (SELECT u.code FROM unit u WHERE u.id = s.unit_id) AS unit_code;

-- name: assignments
-- Every assignment, the matches first in start order, then venues by day.
SELECT s.id, a.login, a.name, a.role, e.code AS event_code, s.unit_id::text AS unit_id,
       u.code AS unit_code, u.name AS unit_name, u.start_at, s.venue, s.day,
       s.assigned_by, s.assigned_at
  FROM scorer_assignment s
  JOIN account a ON a.id = s.account_id
  JOIN event e ON e.id = s.event_id
  LEFT JOIN unit u ON u.id = s.unit_id
 ORDER BY s.unit_id IS NULL, u.start_at NULLS LAST, u.code, s.day, s.venue, a.login
 LIMIT $1;

-- name: refusals
-- The latest actions refused because the match was not the scorer's.
SELECT r.refused_at, r.actor_name, a.login, r.screen, r.kind, r.reason, r.client_id,
       r.unit_id::text AS unit_id, u.code AS unit_code, u.name AS unit_name
  FROM scorer_refusal r
  LEFT JOIN account a ON a.id = r.account_id
  LEFT JOIN unit u ON u.id = r.unit_id
 ORDER BY r.id DESC
 LIMIT $1;

-- name: scorer_accounts
-- The accounts an operator can assign: scorers that can sign in.
SELECT login, name FROM account WHERE role = 'scorer' AND NOT disabled ORDER BY name, login;
