-- Scout's doorbell.

-- name: integration_by_code
SELECT id::text AS id, state, secret, previous_secret
  FROM integration
 WHERE code = $1;

-- name: run_known
SELECT status FROM integration_run WHERE integration_id = $1::uuid AND scout_run_id = $2;

-- name: heard
UPDATE integration SET last_heard_at = now() WHERE id = $1::uuid;
