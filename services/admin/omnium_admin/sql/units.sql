-- Read-only queries of the console (reader pool). Every write goes through command.

-- name: find_units
-- Units that match every word of a search ($1, lower case): a word matches a unit's code, name,
-- venue or discipline (code or name), one of its competitors (name, code or NOC), or its day in
-- the event's zone (2026-09-21). Soonest first; `found` counts every match, past the limit $2.
SELECT u.id::text AS id, u.code, u.name, u.phase, u.start_at, u.venue, u.status, u.pinned,
       d.code AS discipline, d.name AS discipline_name,
       ARRAY(SELECT coalesce(c.name, '')
               FROM unit_competitor s LEFT JOIN competitor c ON c.id = s.competitor_id
              WHERE s.unit_id = u.id ORDER BY s.sort_order) AS sides,
       count(*) OVER () AS found
  FROM unit u JOIN discipline d ON d.id = u.discipline_id JOIN event e ON e.id = u.event_id
 WHERE NOT EXISTS (
   SELECT 1 FROM unnest($1::text[]) AS w (word)
    WHERE NOT (
          u.code ILIKE '%' || w.word || '%' OR u.name ILIKE '%' || w.word || '%'
       OR u.venue ILIKE '%' || w.word || '%' OR d.code ILIKE w.word
       OR d.name ILIKE '%' || w.word || '%'
       OR (u.start_at AT TIME ZONE e.time_zone)::date::text = w.word
       OR EXISTS (
            SELECT 1 FROM unit_competitor s JOIN competitor c ON c.id = s.competitor_id
             WHERE s.unit_id = u.id
               AND (c.name ILIKE '%' || w.word || '%' OR c.code ILIKE w.word
                    OR c.noc ILIKE w.word))))
 ORDER BY u.start_at NULLS LAST, u.code
 LIMIT $2;

-- name: unit
SELECT u.id::text AS id, u.code, u.name, u.phase, u.start_at, u.venue, u.status, u.pinned,
       u.updated_at, d.code AS discipline, e.code AS event_code
  FROM unit u JOIN discipline d ON d.id = u.discipline_id JOIN event e ON e.id = u.event_id
 WHERE u.id = $1::uuid;

-- name: unit_sides
SELECT s.sort_order, c.code AS competitor_code, c.name AS competitor_name, s.score, s.result,
       s.rank, s.medal, s.pinned
  FROM unit_competitor s LEFT JOIN competitor c ON c.id = s.competitor_id
 WHERE s.unit_id = $1::uuid
 ORDER BY s.sort_order;

-- name: unit_history
SELECT code, actor_kind, actor_name, screen, diff, occurred_at
  FROM timeline_item
 WHERE unit_ids @> ARRAY[$1::uuid]
 ORDER BY id DESC
 LIMIT 20;

-- name: lookup_target
-- What an operator typed for "ours": an id, or a competitor or unit code.
SELECT id::text AS id, name FROM competitor WHERE $1 = 'competitor' AND (id::text = $2 OR code = $2)
UNION ALL
SELECT id::text AS id, name FROM unit WHERE $1 = 'unit' AND (id::text = $2 OR code = $2)
LIMIT 2;

-- name: event_zone
-- The time zone the console shows times in: the Games' own (the first event, by its start).
SELECT time_zone FROM event ORDER BY starts_on NULLS LAST, created_at LIMIT 1;

-- name: units_named
-- Units named by what a person knows (name, discipline, sides), found by our ids (:unit_ids)
-- or by Scout's keys (:keys) of one integration (:integration, its code): the newest of its
-- rows that found its unit.
WITH keyed AS (
  SELECT DISTINCT ON (r.subject_key) r.subject_key AS key, r.subject_id AS unit_id
    FROM integration_row r JOIN integration i ON i.id = r.integration_id
   WHERE i.code = :integration AND r.subject_key = ANY(:keys::text[]) AND r.subject_kind = 'unit'
     AND r.subject_id IS NOT NULL
   ORDER BY r.subject_key, r.id DESC
), wanted AS (
  SELECT key, unit_id FROM keyed
  UNION ALL
  SELECT NULL, id FROM unnest(:unit_ids::uuid[]) AS id
)
SELECT w.key, u.id::text AS id, u.code, u.name, u.start_at, d.name AS discipline,
       ARRAY(SELECT coalesce(c.name, '')
               FROM unit_competitor s LEFT JOIN competitor c ON c.id = s.competitor_id
              WHERE s.unit_id = u.id ORDER BY s.sort_order) AS sides
  FROM wanted w JOIN unit u ON u.id = w.unit_id JOIN discipline d ON d.id = u.discipline_id;

-- name: example_code
-- One of our real codes of that kind ($2), for the lookup form's example: one the integration
-- ($1) already maps to, else any.
SELECT code FROM (
  SELECT c.code, 0 AS mapped
    FROM integration_lookup l JOIN integration i ON i.id = l.integration_id
    JOIN competitor c ON c.id = l.our_id
   WHERE i.code = $1 AND l.kind = 'competitor' AND $2 = 'competitor'
  UNION ALL
  SELECT u.code, 0
    FROM integration_lookup l JOIN integration i ON i.id = l.integration_id
    JOIN unit u ON u.id = l.our_id
   WHERE i.code = $1 AND l.kind = 'unit' AND $2 = 'unit'
  UNION ALL
  SELECT code, 1 FROM competitor WHERE $2 = 'competitor'
  UNION ALL
  SELECT code, 1 FROM unit WHERE $2 = 'unit'
) AS known
ORDER BY mapped, code
LIMIT 1;
