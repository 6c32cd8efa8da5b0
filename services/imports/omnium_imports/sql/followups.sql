-- The settle window's timer: keys due for a read are claimed, asked for, and given back if
-- Scout could not be asked.

-- name: followup_integrations
SELECT id::text AS id, code, scout_base_url, scout_job
  FROM integration
 WHERE state = 'on'
 ORDER BY code;

-- name: claim_due_reads
-- Keys due for a read, oldest first, at most one Scout page run's worth, claimed in one statement:
-- each moves on by the asked wait (:asked_wait_seconds s) as it is taken, so another copy of
-- imports (SKIP LOCKED, then the moved time) never asks for the same key, and a page run Scout
-- never makes is asked for again after the wait, not forgotten. A key whose window closed more than
-- one asked wait ago (:settle_seconds s after official) leaves the window instead: asked_again_at
-- is null.
WITH due AS (
  SELECT subject_key, next_read_at
    FROM integration_key_state
   WHERE integration_id = :integration_id::uuid AND next_read_at <= now()
   ORDER BY next_read_at, subject_key
   LIMIT :at_most
     FOR UPDATE SKIP LOCKED
)
UPDATE integration_key_state k
   SET next_read_at = CASE
         WHEN k.official_at
              + make_interval(secs => :settle_seconds::float8 + :asked_wait_seconds::float8)
              < now() THEN NULL
         ELSE now() + make_interval(secs => :asked_wait_seconds::float8)
       END,
       read_asked_at = now()
  FROM due
 WHERE k.integration_id = :integration_id::uuid AND k.subject_key = due.subject_key
RETURNING k.subject_key, due.next_read_at AS was_due, k.next_read_at AS asked_again_at;

-- name: give_back_due_reads
-- Scout could not be asked: the keys are due again as they were (oldest first still), unless
-- a page run has read one since.
UPDATE integration_key_state k
   SET next_read_at = v.was_due, read_asked_at = NULL
  FROM unnest(:subject_keys::text[], :were_due::timestamptz[], :asked_again_at::timestamptz[])
       AS v(subject_key, was_due, asked_again_at)
 WHERE k.integration_id = :integration_id::uuid AND k.subject_key = v.subject_key
   AND k.next_read_at = v.asked_again_at;

-- name: keys_asked_not_read
-- Keys asked for in a page run within the asked wait ($2 s) that no page run has read yet.
SELECT count(*) FROM integration_key_state
 WHERE integration_id = $1::uuid AND read_asked_at > now() - make_interval(secs => $2::float8);
