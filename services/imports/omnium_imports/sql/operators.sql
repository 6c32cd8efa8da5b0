-- What operators see and do (ImportsService).

-- name: integrations
SELECT i.id::text AS id, i.code, i.name, i.state, i.target, i.check_seconds, i.created_at,
       (i.settings ->> 'alert_quiet_intervals')::int AS quiet_intervals,
       (SELECT count(*) FROM review_item w WHERE w.integration_id = i.id AND w.status = 'open')
         AS waiting
  FROM integration i
 ORDER BY i.code;

-- name: newest_run
-- worked_ms (in every run read here): the time the run's jobs worked on it, so a run started
-- an hour after a check paused it does not say it took an hour.
SELECT r.*, r.id::text AS run_id, i.code AS integration_code,
       (SELECT (1000 * extract(epoch FROM sum(coalesce(j.finished_at, now()) - j.started_at)))::bigint
          FROM integration_job j WHERE j.run_id = r.id AND j.started_at IS NOT NULL) AS worked_ms
  FROM integration_run r JOIN integration i ON i.id = r.integration_id
 WHERE r.integration_id = $1::uuid
 ORDER BY r.received_at DESC
 LIMIT 1;

-- name: newest_full_run
-- The card's omnium line is judged by full runs: a page run reads a few keys again, and says
-- nothing of whether the whole site still comes through.
SELECT r.*, r.id::text AS run_id, i.code AS integration_code,
       (SELECT (1000 * extract(epoch FROM sum(coalesce(j.finished_at, now()) - j.started_at)))::bigint
          FROM integration_job j WHERE j.run_id = r.id AND j.started_at IS NOT NULL) AS worked_ms
  FROM integration_run r JOIN integration i ON i.id = r.integration_id
 WHERE r.integration_id = $1::uuid AND r.build = 'all'
 ORDER BY r.received_at DESC
 LIMIT 1;

-- name: newest_paused_run
-- The newest run a check paused that Start can still write: a newer run applied over it ends
-- it older (see overtake_paused_runs), so one still paused is not overtaken.
SELECT r.*, r.id::text AS run_id, i.code AS integration_code,
       (SELECT (1000 * extract(epoch FROM sum(coalesce(j.finished_at, now()) - j.started_at)))::bigint
          FROM integration_job j WHERE j.run_id = r.id AND j.started_at IS NOT NULL) AS worked_ms
  FROM integration_run r JOIN integration i ON i.id = r.integration_id
 WHERE r.integration_id = $1::uuid AND r.status = 'paused_by_guard'
 ORDER BY r.received_at DESC
 LIMIT 1;

-- name: newest_scout_verdict
SELECT scout_status, reason, coalesce(scout_finished_at, received_at) AS at
  FROM integration_run
 WHERE integration_id = $1::uuid AND scout_status IS NOT NULL
 ORDER BY received_at DESC
 LIMIT 1;

-- name: open_alerts
SELECT id, kind, message, raised_at, run_id::text AS run_id FROM alert
 WHERE integration_id = $1::uuid AND status = 'open'
 ORDER BY raised_at;

-- name: runs
SELECT r.*, r.id::text AS run_id, i.code AS integration_code,
       (SELECT (1000 * extract(epoch FROM sum(coalesce(j.finished_at, now()) - j.started_at)))::bigint
          FROM integration_job j WHERE j.run_id = r.id AND j.started_at IS NOT NULL) AS worked_ms
  FROM integration_run r JOIN integration i ON i.id = r.integration_id
 WHERE i.code = $1
 ORDER BY r.received_at DESC
 LIMIT $2;

-- name: run
SELECT r.*, r.id::text AS run_id, i.code AS integration_code,
       (SELECT (1000 * extract(epoch FROM sum(coalesce(j.finished_at, now()) - j.started_at)))::bigint
          FROM integration_job j WHERE j.run_id = r.id AND j.started_at IS NOT NULL) AS worked_ms
  FROM integration_run r JOIN integration i ON i.id = r.integration_id
 WHERE r.id = $1::uuid;

-- name: run_row_totals
-- How many rows of a run fall in each section of its page (a row may be in two).
SELECT count(*) FILTER (WHERE outcome = 'accepted')::int AS changed,
       count(*) FILTER (WHERE kept_by_hand <> '[]'::jsonb)::int AS kept_by_hand,
       count(*) FILTER (WHERE outcome = 'held')::int AS held,
       count(*) FILTER (WHERE outcome IN ('refused', 'not_placed', 'problem'))::int AS refused
  FROM integration_row
 WHERE run_id = $1::uuid;

-- name: run_rows
-- The first :per_section rows of each section, in row order; a row in two sections comes once.
-- `held`: with :hide_held, the row carries a result the checker holds that no approval has covered
-- (:held_disciplines: the disciplines held by setting); the batch's timeline item says when it was
-- saved.
SELECT r.position, r.subject_key, r.outcome, r.reason, r.diff, r.kept_by_hand,
       :hide_held::boolean
         AND (diff_holds_results(r.diff, b.id, :held_disciplines::text[])
              OR diff_holds_results(r.kept_by_hand, b.id, :held_disciplines::text[])) AS held
  FROM integration_row r
  LEFT JOIN LATERAL (
    SELECT t.id FROM timeline_item t
     WHERE :hide_held::boolean AND r.subject_kind = 'unit' AND t.unit_ids @> ARRAY[r.subject_id]
       AND t.command_id = r.run_id::text || ':' || r.batch_no
  ) b ON true
 WHERE r.id IN (
       (SELECT id FROM integration_row WHERE run_id = :run_id::uuid AND outcome = 'accepted'
         ORDER BY position LIMIT :per_section)
       UNION
       (SELECT id FROM integration_row WHERE run_id = :run_id::uuid AND kept_by_hand <> '[]'::jsonb
         ORDER BY position LIMIT :per_section)
       UNION
       (SELECT id FROM integration_row WHERE run_id = :run_id::uuid AND outcome = 'held'
         ORDER BY position LIMIT :per_section)
       UNION
       (SELECT id FROM integration_row
         WHERE run_id = :run_id::uuid AND outcome IN ('refused', 'not_placed', 'problem')
         ORDER BY position LIMIT :per_section))
 ORDER BY r.position;

-- name: waiting
SELECT w.id, i.code AS integration_code, i.target, w.kind, w.subject_key, w.question,
       w.run_id::text AS run_id, w.created_at
  FROM review_item w JOIN integration i ON i.id = w.integration_id
 WHERE w.status = 'open' AND ($1 = '' OR i.code = $1)
 ORDER BY w.created_at;

-- name: review_item
-- `medal_ref` names a medal row as its withdrawal does.
SELECT w.id, w.kind, w.subject_key, w.subject_id::text AS subject_id, w.status,
       i.code AS integration_code, i.id::text AS integration_id,
       (SELECT coalesce(d.code, '') || ':' || m.noc
          FROM medal_row m LEFT JOIN discipline d ON d.id = m.discipline_id
         WHERE m.id = w.subject_id) AS medal_ref
  FROM review_item w JOIN integration i ON i.id = w.integration_id
 WHERE w.id = $1;

-- name: mark_started
-- A person's Start: the run is Running (received) from now, until its job closes it.
UPDATE integration_run
   SET status = 'received', finished_at = NULL,
       reason = 'Started past its check by ' || $2 || '; writing now.'
 WHERE id = $1::uuid AND status = 'paused_by_guard';

-- name: set_state
UPDATE integration SET state = $2 WHERE code = $1 RETURNING id::text;

-- name: integration_id_by_code
SELECT id::text FROM integration WHERE code = $1;
