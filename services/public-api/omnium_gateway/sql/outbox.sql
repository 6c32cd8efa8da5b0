-- The outbox as the gateway reads it: what changed, named by the codes its cache keys use.

-- name: outbox_head
SELECT coalesce(max(id), 0) FROM domain_event;

-- name: outbox_since
-- Rows past the watermark, and the ids still missing below it (a transaction that took its id
-- before a later one committed): those are read again until they show up or age out.
-- `medal`: the row changes a side's medal, which may hold or free the medal table (checker).
SELECT d.id, d.kind, d.subject_kind, e.code AS event, d.payload->>'code' AS code,
       d.subject_id::text AS subject_id, d.trace_context,
       extract(epoch FROM clock_timestamp() - d.saved_at)::float8 AS age,
       coalesce(jsonb_path_exists(
         d.payload, '$.changes[*] ? (@.field like_regex "^sides\\[[0-9]+\\]\\.medal$")'),
         false) AS medal
  FROM domain_event d
  JOIN event e ON e.id = d.event_id
 WHERE d.id > :watermark OR d.id = ANY(:gaps::bigint[])
 ORDER BY d.id
 LIMIT :limit;

-- name: units_of_competitors
-- A competitor's name or NOC shows in every unit it plays in.
SELECT DISTINCT e.code AS event, u.code
  FROM unit_competitor s
  JOIN unit u ON u.id = s.unit_id
  JOIN event e ON e.id = u.event_id
 WHERE s.competitor_id = ANY($1::uuid[]);

-- name: units_of_events
-- Every unit of these Games: a checker switched on changes what any of them may show.
SELECT e.code AS event, u.code
  FROM unit u
  JOIN event e ON e.id = u.event_id
 WHERE e.code = ANY($1::text[]);
