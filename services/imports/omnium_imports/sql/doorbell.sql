-- Scout's doorbell.

-- name: integration_by_code
-- The previous secret only within its rotation window (none set: kept until replaced).
SELECT id::text AS id, state, secret,
       CASE WHEN previous_secret_until IS NULL OR previous_secret_until > now()
            THEN previous_secret END AS previous_secret
  FROM integration
 WHERE code = $1;

-- name: run_known
SELECT status FROM integration_run WHERE integration_id = $1::uuid AND scout_run_id = $2;

-- name: heard
UPDATE integration SET last_heard_at = now() WHERE id = $1::uuid;
