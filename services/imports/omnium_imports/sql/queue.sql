-- The import queue: jobs claimed with SKIP LOCKED, held by a lease the worker renews.

-- name: enqueue_pull
-- A doorbell rung twice for one Scout run queues one job (unique index); the second gets null.
-- :trace_context: the ring's traceparent, so the run that works the job continues the ring's trace.
INSERT INTO integration_job (integration_id, kind, scout_run_id, via, trace_context)
VALUES (:integration_id::uuid, 'pull', :scout_run_id, 'doorbell', :trace_context)
ON CONFLICT (integration_id, scout_run_id) WHERE kind = 'pull' AND via = 'doorbell' DO NOTHING
RETURNING id;

-- name: enqueue_start
-- An operator's Start: the same Scout run again, past the guard that paused it. The job names
-- the run from the start: the run shows Running at once, and no sweep closes it while queued.
INSERT INTO integration_job (integration_id, kind, scout_run_id, via, past_guards, run_id)
SELECT r.integration_id, 'pull', r.scout_run_id, 'operator', true, r.id
  FROM integration_run r
 WHERE r.id = $1::uuid
RETURNING id;

-- name: enqueue_resume
-- A partly done run, again after a wait: the same Scout run into the same run (its saved batches
-- answer duplicate). Null once it has resumed :max_resumes times by itself, or when a job of the
-- run is queued already; then it waits for a person.
INSERT INTO integration_job (integration_id, kind, scout_run_id, via, past_guards, run_id,
                             not_before)
SELECT r.integration_id, 'pull', r.scout_run_id, 'resume', :past_guards, r.id,
       now() + make_interval(secs => :wait_seconds)
  FROM integration_run r
 WHERE r.id = :run_id::uuid AND r.status = 'partly_done'
   AND (SELECT count(*) FROM integration_job j WHERE j.run_id = r.id AND j.via = 'resume')
       < :max_resumes
   AND NOT EXISTS (SELECT 1 FROM integration_job j
                    WHERE j.run_id = r.id AND j.status = 'queued')
RETURNING id;

-- name: resumes_of_run
SELECT count(*) FROM integration_job WHERE run_id = $1::uuid AND via = 'resume';

-- name: note_resume
-- A partly done run's reason says when it resumes by itself (the run screen shows it).
UPDATE integration_run SET reason = coalesce(reason || ' ', '') || $2
 WHERE id = $1::uuid AND status = 'partly_done';

-- name: stop_resuming
-- The run resumed by itself as often as it may: its reason now says it waits for a person.
UPDATE integration_run SET reason = $2 WHERE id = $1::uuid AND status = 'partly_done';

-- name: enqueue_check
INSERT INTO integration_job (integration_id, kind, via)
VALUES ($1::uuid, 'check', $2)
ON CONFLICT (integration_id) WHERE kind = 'check' AND status IN ('queued', 'running') DO NOTHING
RETURNING id;

-- name: claim
-- The oldest job that is queued, or running with a lease that ran out (its worker died), of an
-- integration that has no other job running. The unique index on running jobs settles a race
-- between two workers claiming two jobs of one integration: the loser gets a unique violation.
WITH candidate AS (
  SELECT j.id
    FROM integration_job j
   WHERE (j.status = 'queued' OR (j.status = 'running' AND j.lease_until < now()))
     AND (j.not_before IS NULL OR j.not_before <= now())
     AND NOT EXISTS (
           SELECT 1 FROM integration_job r
            WHERE r.integration_id = j.integration_id AND r.status = 'running'
              AND r.lease_until >= now() AND r.id <> j.id)
   ORDER BY j.created_at, j.id
   LIMIT 1
     FOR UPDATE SKIP LOCKED
)
UPDATE integration_job j
   SET status = 'running',
       attempts = j.attempts + 1,
       lease_until = now() + make_interval(secs => $2),
       worker = $1,
       started_at = coalesce(j.started_at, now())
  FROM candidate c
 WHERE j.id = c.id
RETURNING j.id, j.integration_id::text AS integration_id, j.kind, j.scout_run_id, j.via,
          j.attempts, j.run_id::text AS run_id, j.past_guards, j.trace_context;

-- name: renew
-- Zero rows: the lease ran out and another worker took the job; this worker must stop.
UPDATE integration_job
   SET lease_until = now() + make_interval(secs => :lease_seconds)
 WHERE id = :job_id AND worker = :worker AND status = 'running'
RETURNING id;

-- name: finish
UPDATE integration_job
   SET status = :status, error = :error, run_id = coalesce(:run_id::uuid, run_id),
       finished_at = now(), lease_until = NULL
 WHERE id = :job_id AND worker = :worker
RETURNING id;

-- name: release
-- A graceful stop: the job is queued again at once, its run kept, for another copy to continue
-- (its saved batches answer duplicate). Zero rows: it was not this worker's any more.
UPDATE integration_job
   SET status = 'queued', lease_until = NULL, worker = NULL
 WHERE id = $1 AND worker = $2 AND status = 'running'
RETURNING id;

-- name: attach_run
UPDATE integration_job SET run_id = $2::uuid WHERE id = $1;

-- name: quiet_integrations
-- The scheduler: integrations that are on and have not been heard from for their interval.
UPDATE integration i
   SET last_heard_at = now()
 WHERE i.state = 'on'
   AND (i.last_heard_at IS NULL
        OR i.last_heard_at < now() - make_interval(secs => i.check_seconds))
RETURNING i.id::text;

-- name: queue_depth
-- For /metrics: jobs waiting and running, and how long the oldest waiting one has waited.
SELECT count(*) FILTER (WHERE status = 'queued')::int AS queued,
       count(*) FILTER (WHERE status = 'running')::int AS running,
       coalesce(extract(epoch FROM clock_timestamp()
                        - min(created_at) FILTER (WHERE status = 'queued')), 0)::float8 AS oldest
  FROM integration_job
 WHERE status IN ('queued', 'running');
