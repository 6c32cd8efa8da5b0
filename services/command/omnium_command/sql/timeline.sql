-- Reading the log.

-- name: timeline_for_subject
-- A unit's timeline holds the batches that touched it too; of each, only this unit's part of
-- the diff (its own fields and its sides'), not the other units' of the same batch.
SELECT t.id, t.command_id, t.code, t.subject_kind, t.subject_id::text AS subject_id,
       t.actor_kind, t.actor_name, t.source_code, t.screen, t.payload,
       CASE WHEN $1 = 'unit' AND t.subject_kind <> 'unit' THEN
         (SELECT coalesce(jsonb_agg(x.d ORDER BY x.n), '[]'::jsonb)
            FROM jsonb_array_elements(t.diff) WITH ORDINALITY AS x(d, n)
           WHERE x.d->>'id' = $2)
       ELSE t.diff END AS diff,
       t.occurred_at
  FROM timeline_item t
 WHERE ((t.subject_kind = $1 AND t.subject_id = $2::uuid)
        OR ($1 = 'unit' AND t.unit_ids @> ARRAY[$2::uuid]))
   AND ($3::bigint IS NULL OR t.id < $3)
 ORDER BY t.id DESC
 LIMIT $4;

-- name: timeline_for_event
SELECT t.id, t.command_id, t.code, t.subject_kind, t.subject_id::text AS subject_id,
       t.actor_kind, t.actor_name, t.source_code, t.screen, t.payload, t.diff, t.occurred_at
  FROM timeline_item t
 WHERE t.event_id = (SELECT e.id FROM event e WHERE e.code = $1)
   AND ($2::bigint IS NULL OR t.id < $2)
 ORDER BY t.id DESC
 LIMIT $3;

-- name: unit_id_by_code
SELECT u.id::text FROM unit u JOIN event e ON e.id = u.event_id
 WHERE e.code = $1 AND u.code = $2;
