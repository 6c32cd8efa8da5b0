-- Runs, recorded first in short transactions of their own, and what the pipeline reads.

-- name: integration
SELECT i.id::text AS id, i.code, i.state, i.target, i.scout_base_url, i.scout_job,
       i.creates_units, i.current_version, e.code AS event_code, e.time_zone,
       v.spec, i.settings
  FROM integration i
  JOIN event e ON e.id = i.event_id
  LEFT JOIN integration_version v
         ON v.integration_id = i.id AND v.version = i.current_version
 WHERE i.id = $1::uuid;

-- name: lookups
SELECT kind, external_id, our_id::text AS our_id
  FROM integration_lookup
 WHERE integration_id = $1::uuid;

-- name: unit_ids_by_code
SELECT u.code, u.id::text AS id
  FROM unit u
 WHERE u.event_id = (SELECT i.event_id FROM integration i WHERE i.id = $1::uuid)
   AND u.code = ANY($2::text[]);

-- name: find_run
SELECT id::text AS id, status, batch_done
  FROM integration_run
 WHERE integration_id = $1::uuid AND scout_run_id = $2;

-- name: record_run
-- The run is on record from here on, whatever happens next. A run that failed on our side
-- before (Scout unreachable, say) is taken up again by a later attempt.
INSERT INTO integration_run AS r (integration_id, scout_run_id, status, scout_status, build, day,
                                  row_count, scout_finished_at, version, job_id, reason,
                                  started_at, finished_at)
VALUES (:integration_id::uuid, :scout_run_id, :status, :scout_status, :build, :day::date,
        :row_count, :scout_finished_at, :version, :job_id, :reason, now(),
        CASE WHEN :status IN ('received') THEN NULL ELSE now() END)
-- A run resumed (partly done) or started past its guards is Running again while it writes,
-- not shown as it was left.
ON CONFLICT (integration_id, scout_run_id) DO UPDATE SET
  status = CASE WHEN r.status IN ('failed', 'partly_done', 'paused_by_guard')
                  OR EXCLUDED.status <> 'received' THEN EXCLUDED.status
                ELSE r.status END,
  reason = CASE WHEN r.status IN ('failed', 'partly_done', 'paused_by_guard')
                  OR EXCLUDED.status <> 'received' THEN EXCLUDED.reason
                ELSE r.reason END,
  row_count = EXCLUDED.row_count,
  version = EXCLUDED.version,
  job_id = EXCLUDED.job_id,
  finished_at = CASE WHEN EXCLUDED.status <> 'received' THEN now() ELSE NULL END
RETURNING r.id::text AS id, r.status, r.batch_done;

-- name: newer_applied_run
-- A run older than one already applied must not take the data back in time.
SELECT scout_run_id
  FROM integration_run
 WHERE integration_id = :integration_id::uuid AND status IN ('done', 'partly_done')
   AND scout_finished_at > :finished_after AND (build = 'all' OR build = :build)
 ORDER BY scout_finished_at DESC
 LIMIT 1;

-- name: set_batches
UPDATE integration_run
   SET batch_total = :batch_total,
       plan = :plan::jsonb,
       status = CASE WHEN status = 'received' THEN 'applying' ELSE status END
 WHERE id = :run_id::uuid;

-- name: run_plan
SELECT plan FROM integration_run WHERE id = $1::uuid;

-- name: finish_run
UPDATE integration_run
   SET status = :status, reason = :reason, outcomes = :outcomes::jsonb, finished_at = now()
 WHERE id = :run_id::uuid;

-- name: overtake_paused_runs
-- After run $1 is applied: runs a check paused that are older than it (the rule of
-- newer_applied_run) end older, with a reason that names it. Start would end them so.
UPDATE integration_run p
   SET status = 'older', finished_at = coalesce(p.finished_at, now()),
       reason = 'Overtaken by run ' || n.scout_run_id || ', newer and written already, so it '
                || 'cannot be started (it would take the data back). It was paused: '
                || coalesce(p.reason, '')
  FROM integration_run n
 WHERE n.id = $1::uuid AND n.status IN ('done', 'partly_done')
   AND p.integration_id = n.integration_id AND p.status = 'paused_by_guard' AND p.id <> n.id
   AND p.scout_finished_at < n.scout_finished_at
   AND (n.build = 'all' OR n.build = p.build);

-- name: forget_mapping_rows
-- A resumed run logs its mapping outcomes again: the earlier attempt's go first.
DELETE FROM integration_row WHERE run_id = $1::uuid AND batch_no IS NULL;

-- name: log_mapping_rows
INSERT INTO integration_row (run_id, integration_id, position, subject_key, subject_kind,
                             row_hash, outcome, reason)
SELECT :run_id::uuid, :integration_id::uuid, v.position, v.key, :subject_kind, v.hash, v.outcome,
       v.reason
  FROM unnest(:positions::int[], :keys::text[], :hashes::bytea[], :outcomes::text[],
              :reasons::text[])
       AS v(position, key, hash, outcome, reason);

-- name: last_applied_run
SELECT id::text FROM integration_run
 WHERE integration_id = $1::uuid AND status IN ('done', 'partly_done')
 ORDER BY finished_at DESC NULLS LAST
 LIMIT 1;

-- name: set_sized
UPDATE integration_run SET sized = $2 WHERE id = $1::uuid;

-- name: run_sized
SELECT sized FROM integration_run WHERE id = $1::uuid;

-- name: link_job_to_run
UPDATE integration_job SET run_id = $2::uuid WHERE id = $1;

-- name: keys_of_newer_runs
-- The keys a run newer than run $2 (by when Scout finished it), of any build, wrote since:
-- run $2, started or resumed late, must not take them back. Newer runs are few, and none in
-- the usual case, so this reads nothing then.
WITH newer AS (
  SELECT n.id, n.scout_run_id
    FROM integration_run n, integration_run r
   WHERE r.id = $2::uuid AND n.integration_id = $1::uuid AND n.id <> r.id
     AND n.scout_finished_at > r.scout_finished_at
     AND n.status IN ('done', 'partly_done', 'failed', 'applying', 'received')
)
SELECT k.subject_key, newer.scout_run_id
  FROM integration_key_state k JOIN newer ON newer.id = k.last_seen_run
 WHERE k.integration_id = $1::uuid;
