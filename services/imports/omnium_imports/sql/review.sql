-- Alerts and review items.

-- name: raise_alert
INSERT INTO alert (integration_id, kind, message, run_id)
VALUES (:integration_id::uuid, :kind, :message, :run_id::uuid)
ON CONFLICT (integration_id, kind) WHERE status = 'open' DO NOTHING
RETURNING id;

-- name: restate_alert
UPDATE alert SET message = :message
 WHERE integration_id = :integration_id::uuid AND kind = :kind AND status = 'open'
RETURNING id;

-- name: alert_sent
UPDATE alert SET sent_at = now() WHERE id = $1;

-- name: clear_alerts
UPDATE alert SET status = 'cleared', cleared_at = now()
 WHERE integration_id = $1::uuid AND kind = ANY($2::text[]) AND status = 'open';

-- name: open_review
INSERT INTO review_item (integration_id, kind, subject_key, question, run_id, subject_id)
VALUES (:integration_id::uuid, :kind, :subject_key, :question, :run_id::uuid, :subject_id::uuid)
ON CONFLICT (integration_id, kind, subject_key) WHERE status = 'open' DO NOTHING
RETURNING id;

-- name: any_open_reviews
SELECT EXISTS (SELECT 1 FROM review_item
                WHERE integration_id = $1::uuid AND kind = $2 AND status = 'open');

-- name: close_reviews
UPDATE review_item SET status = 'done', resolved_at = now(), resolved_by = :resolved_by
 WHERE integration_id = :integration_id::uuid AND kind = :kind
   AND subject_key = ANY(:subject_keys::text[])
   AND status = 'open';

-- name: answer_review
UPDATE review_item SET status = :status, resolved_at = now(), resolved_by = :resolved_by
 WHERE integration_id = :integration_id::uuid AND kind = :kind AND subject_key = :subject_key
   AND status = 'open';

-- name: close_unlisted_reviews
-- After a complete run: items about keys it no longer lists are about rows Scout dropped.
UPDATE review_item SET status = 'done', resolved_at = now(), resolved_by = :resolved_by
 WHERE integration_id = :integration_id::uuid AND kind = :kind
   AND subject_key <> ALL(:listed_keys::text[])
   AND status = 'open';

-- name: close_outdated_guards
-- After run $1 ends: guard pauses whose run can no longer be started. Its own (written after
-- a Start, or ended older), and those of runs older than it when it was applied: Start would
-- end them older (the same rule as newer_applied_run).
UPDATE review_item w
   SET status = 'done', resolved_at = now(),
       resolved_by = CASE WHEN p.id = n.id AND n.status <> 'older' THEN 'start' ELSE 'import' END
  FROM integration_run n, integration_run p
 WHERE n.id = $1::uuid
   AND w.integration_id = n.integration_id AND w.kind = 'guard' AND w.status = 'open'
   AND p.id = w.run_id
   AND (p.id = n.id
        OR (n.status IN ('done', 'partly_done') AND p.scout_finished_at < n.scout_finished_at
            AND (n.build = 'all' OR n.build = p.build)));

-- name: run_for_alerts
SELECT build, status, scout_status FROM integration_run WHERE id = $1::uuid;

-- name: clear_run_failed
-- After run :run_id is done: its own failure, a check's that read no run, and (a full run,
-- :full_run) every failed run's: a full run done reads and writes all a failed one would have.
UPDATE alert SET status = 'cleared', cleared_at = now()
 WHERE integration_id = :integration_id::uuid AND kind = 'run_failed' AND status = 'open'
   AND (run_id IS NULL OR run_id = :run_id::uuid OR :full_run::bool);

-- name: any_partly_done
-- A run partly done, or one being resumed now (Running again until it ends).
SELECT EXISTS (SELECT 1 FROM integration_run r
                WHERE r.integration_id = $1::uuid
                  AND (r.status = 'partly_done'
                       OR (r.status IN ('received', 'applying')
                           AND EXISTS (SELECT 1 FROM integration_job j
                                        WHERE j.run_id = r.id AND j.via = 'resume'
                                          AND j.status IN ('queued', 'running')))));

-- name: recent_full_scout_statuses
SELECT scout_status FROM integration_run
 WHERE integration_id = $1::uuid AND scout_status IS NOT NULL AND build = 'all'
 ORDER BY received_at DESC
 LIMIT $2;

-- name: recent_scout_statuses
SELECT scout_status FROM integration_run
 WHERE integration_id = $1::uuid AND scout_status IS NOT NULL
 ORDER BY received_at DESC
 LIMIT $2;

-- name: usual_row_counts
-- Written runs that passed the size check on their own: a short run a person started past it
-- must not become the usual size, or the next short run would pass by itself.
SELECT row_count FROM integration_run
 WHERE integration_id = :integration_id::uuid AND status IN ('done', 'partly_done')
   AND build = :build
   AND sized AND row_count IS NOT NULL
 ORDER BY received_at DESC
 LIMIT :at_most;

-- name: current_units
SELECT u.id::text AS id, u.status, u.phase, u.start_at, u.venue, u.pinned,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                          'order', s.sort_order, 'competitor_id', s.competitor_id,
                          'score', s.score, 'result', s.result, 'rank', s.rank,
                          'medal', s.medal, 'pinned', s.pinned))
                   FROM unit_competitor s WHERE s.unit_id = u.id), '[]') AS sides
  FROM unit u
 WHERE u.id = ANY($1::uuid[]);

-- name: current_medal_rows
-- The I12 guard of a medal table: our rows of the integration's event, by the name a batch
-- gives them.
SELECT coalesce(d.code, '') || ':' || m.noc AS ref, m.total, m.pinned
  FROM medal_row m LEFT JOIN discipline d ON d.id = m.discipline_id
 WHERE m.event_id = (SELECT i.event_id FROM integration i WHERE i.id = $1::uuid);

-- name: mark_missing
-- After full run :run_id: keys it did not list (:missing_keys) count one more missing run, once per
-- run (the step is tried again after a lost answer, and a repeat counts nothing twice); keys it
-- listed again (:listed_keys) are reset, and a person's answer about them is forgotten. A key a
-- person answered is not counted again until a run lists it again. `gone_already`: its unit is
-- cancelled, or its medal row withdrawn; there is nothing left to ask.
UPDATE integration_key_state k
   SET missing_runs = CASE WHEN k.subject_key = ANY(:missing_keys::text[])
                           THEN k.missing_runs
                                + (k.missed_in_run IS DISTINCT FROM :run_id::uuid)::int
                           ELSE 0 END,
       missed_in_run = CASE WHEN k.subject_key = ANY(:missing_keys::text[]) THEN :run_id::uuid END,
       missing_answered = false
 WHERE k.integration_id = :integration_id::uuid
   AND ((k.subject_key = ANY(:missing_keys::text[]) AND NOT k.missing_answered)
        OR k.subject_key = ANY(:listed_keys::text[]))
RETURNING k.subject_key, k.subject_id::text AS subject_id, k.missing_runs,
          (EXISTS (SELECT 1 FROM unit u WHERE u.id = k.subject_id AND u.status = 'CANCELLED')
           OR EXISTS (SELECT 1 FROM medal_row m
                       WHERE m.id = k.subject_id AND m.total = 0)) AS gone_already,
          (SELECT coalesce(d.code, '') || ':' || m.noc
             FROM medal_row m LEFT JOIN discipline d ON d.id = m.discipline_id
            WHERE m.id = k.subject_id) AS medal_ref;

-- name: answer_missing
-- A person answered the key's missing question: not counted or asked again until it is seen.
UPDATE integration_key_state
   SET missing_runs = 0, missed_in_run = NULL, missing_answered = true
 WHERE integration_id = $1::uuid AND subject_key = $2;

-- name: quiet_for_long
-- No new full run for `alert_quiet_intervals` check intervals: page runs, asked for by the
-- settle window, come whether or not Scout still reads the whole site.
-- The integration's own alert_quiet_intervals (its file's settings) over the service's ($1).
SELECT i.id::text AS id, i.check_seconds, q.intervals
  FROM integration i,
       LATERAL (SELECT coalesce((i.settings ->> 'alert_quiet_intervals')::int, $1) AS intervals) q
 WHERE i.state = 'on'
   AND coalesce((SELECT max(r.received_at) FROM integration_run r
                  WHERE r.integration_id = i.id AND r.build = 'all'),
                i.created_at)
       < now() - make_interval(secs => i.check_seconds * q.intervals);

-- name: sweep_abandoned_runs
-- Runs left received or applying past the lease with no job to finish them (a job that ended
-- without closing its run): closed failed, with a reason a person can act on.
UPDATE integration_run r
   SET status = 'failed', finished_at = now(),
       reason = 'Run ' || r.scout_run_id || ' was left ' || r.status || ' with no job working on '
                || 'it, so it was closed. What it saved stays; the next check reads Scout again, '
                || 'or press Run now.'
 WHERE r.status IN ('received', 'applying')
   AND r.received_at < now() - make_interval(secs => $1)
   AND NOT EXISTS (SELECT 1 FROM integration_job j
                    WHERE j.run_id = r.id AND j.status IN ('queued', 'running'))
RETURNING r.id::text AS id, r.integration_id::text AS integration_id, r.reason;
