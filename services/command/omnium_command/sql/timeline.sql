-- Reading the log.

-- name: timeline_for_subject
-- A unit's timeline holds the batches that touched it too; of each, only this unit's part of
-- the diff (its own fields and its sides'), not the other units' of the same batch.
-- $5: leave out the items that carry a result the checker holds and no approval has covered
-- ($6: the disciplines held by setting), for callers that may not see held results.
SELECT x.* FROM (
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
     AND ($3::bigint IS NULL OR t.id < $3)) x
 WHERE NOT ($5::boolean AND diff_holds_results(x.diff, x.id, $6::text[]))
 ORDER BY x.id DESC
 LIMIT $4;

-- name: timeline_for_event
-- $4, $5: as $5, $6 of timeline_for_subject.
SELECT t.id, t.command_id, t.code, t.subject_kind, t.subject_id::text AS subject_id,
       t.actor_kind, t.actor_name, t.source_code, t.screen, t.payload, t.diff, t.occurred_at
  FROM timeline_item t
 WHERE t.event_id = (SELECT e.id FROM event e WHERE e.code = $1)
   AND ($2::bigint IS NULL OR t.id < $2)
   AND NOT ($4::boolean AND diff_holds_results(t.diff, t.id, $5::text[]))
 ORDER BY t.id DESC
 LIMIT $3;

-- name: unit_id_by_code
SELECT u.id::text FROM unit u JOIN event e ON e.id = u.event_id
 WHERE e.code = $1 AND u.code = $2;
