-- Read-only queries of the console (reader pool). Every write goes through command.

-- name: find_units
-- A unit by its code, name, venue or discipline; newest start first.
SELECT u.id::text AS id, u.code, u.name, u.phase, u.start_at, u.venue, u.status, u.pinned,
       d.code AS discipline
  FROM unit u JOIN discipline d ON d.id = u.discipline_id
 WHERE $1 = '' OR u.code ILIKE '%' || $1 || '%' OR u.name ILIKE '%' || $1 || '%'
    OR u.venue ILIKE '%' || $1 || '%' OR d.code ILIKE $1
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
