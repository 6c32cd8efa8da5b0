-- The delivery promise: each client's sends over a sliding window, against the target
-- of its transport.

-- name: promise
-- Per client, the sends that finished in the last :window_seconds: how many, how many were
-- delivered within :push_target (webhooks) or :sftp_target (files) of the save, the median and
-- 95th percentile of that delay, and the newest delivery and failure. A failed or refused send is
-- a miss; a resend (a person asked for it) carries no new change and is left out.
WITH target AS (
  SELECT c.id, c.code, c.name, c.transport, c.enabled,
         CASE c.transport WHEN 'sftp' THEN :sftp_target::float8
                          ELSE :push_target::float8 END AS seconds
    FROM client c
   WHERE :code::text IS NULL OR c.code = :code
),
sent AS (
  SELECT a.client_id, a.outcome,
         extract(epoch FROM a.delivered_at - a.saved_at)::float8 AS delay
    FROM delivery_attempt a
   WHERE a.finished_at > clock_timestamp() - make_interval(secs => :window_seconds::float8)
     AND NOT a.resend AND a.saved_at IS NOT NULL
)
SELECT t.id::text AS client_id, t.code, t.name, t.transport, t.enabled,
       t.seconds AS target_seconds,
       count(s.outcome)::int AS sends,
       (count(*) FILTER (WHERE s.outcome = 'delivered' AND s.delay <= t.seconds))::int AS within,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY s.delay)
         FILTER (WHERE s.outcome = 'delivered') AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY s.delay)
         FILTER (WHERE s.outcome = 'delivered') AS p95,
       (SELECT x.delivered_at FROM delivery_attempt x
         WHERE x.client_id = t.id AND x.outcome = 'delivered'
         ORDER BY x.id DESC LIMIT 1) AS last_delivered_at,
       (SELECT CASE WHEN x.outcome <> 'delivered' THEN x.error END FROM delivery_attempt x
         WHERE x.client_id = t.id ORDER BY x.id DESC LIMIT 1) AS last_error
  FROM target t
  LEFT JOIN sent s ON s.client_id = t.id
 GROUP BY t.id, t.code, t.name, t.transport, t.enabled, t.seconds
 ORDER BY t.code;

-- name: raise_promise_alert
INSERT INTO delivery_alert (client_id, kind, message) VALUES ($1, 'promise', $2)
ON CONFLICT (client_id, kind) WHERE status = 'open' DO NOTHING
RETURNING id;

-- name: clear_promise_alert
-- Only the copy whose update cleared it sends the word on.
UPDATE delivery_alert SET status = 'cleared', cleared_at = now()
 WHERE client_id = $1 AND kind = 'promise' AND status = 'open'
RETURNING id;
