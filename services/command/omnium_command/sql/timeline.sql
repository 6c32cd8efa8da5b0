-- Reading the log.

-- name: timeline_for_subject
-- A unit's timeline holds the batches that touched it too; of each, only this unit's part of
-- the diff (its own fields and its sides'), not the other units' of the same batch.
-- :hidden: leave out the items that carry a result the checker holds and no approval has covered
-- (:held: the disciplines held by setting), for callers that may not see held results.
SELECT x.* FROM (
  SELECT t.id, t.command_id, t.code, t.subject_kind, t.subject_id::text AS subject_id,
         t.actor_kind, t.actor_name, t.source_code, t.screen, t.payload,
         CASE WHEN :kind = 'unit' AND t.subject_kind <> 'unit' THEN
           (SELECT coalesce(jsonb_agg(x.d ORDER BY x.n), '[]'::jsonb)
              FROM jsonb_array_elements(t.diff) WITH ORDINALITY AS x(d, n)
             WHERE x.d->>'id' = :subject_id)
         ELSE t.diff END AS diff,
         t.occurred_at
    FROM timeline_item t
   WHERE ((t.subject_kind = :kind AND t.subject_id = :subject_id::uuid)
          OR (:kind = 'unit' AND t.unit_ids @> ARRAY[:subject_id::uuid]))
     AND (:before::bigint IS NULL OR t.id < :before)) x
 WHERE NOT (:hidden::boolean AND diff_holds_results(x.diff, x.id, :held::text[]))
 ORDER BY x.id DESC
 LIMIT :limit;

-- name: timeline_for_event
-- :hidden and :held as in timeline_for_subject.
SELECT t.id, t.command_id, t.code, t.subject_kind, t.subject_id::text AS subject_id,
       t.actor_kind, t.actor_name, t.source_code, t.screen, t.payload, t.diff, t.occurred_at
  FROM timeline_item t
 WHERE t.event_id = (SELECT e.id FROM event e WHERE e.code = :event_code)
   AND (:before::bigint IS NULL OR t.id < :before)
   AND NOT (:hidden::boolean AND diff_holds_results(t.diff, t.id, :held::text[]))
 ORDER BY t.id DESC
 LIMIT :limit;

-- name: unit_id_by_code
SELECT u.id::text FROM unit u JOIN event e ON e.id = u.event_id
 WHERE e.code = $1 AND u.code = $2;
