-- Clients and feeds from settings (a file or a mapping), and what the gRPC service shows.

-- name: upsert_client
INSERT INTO client (code, name, event_id, transport, settings, enabled)
SELECT :code, :name, e.id, :transport, :settings, :enabled FROM event e WHERE e.code = :event_code
ON CONFLICT (code) DO UPDATE SET
  name = EXCLUDED.name, event_id = EXCLUDED.event_id, transport = EXCLUDED.transport,
  settings = EXCLUDED.settings, enabled = EXCLUDED.enabled, updated_at = now()
RETURNING id::text, event_id::text;

-- name: discipline_ids
SELECT d.code, d.id::text FROM discipline d JOIN event e ON e.id = d.event_id WHERE e.code = $1;

-- name: upsert_feed
INSERT INTO client_feed (client_id, kind, format, discipline_id, top_n, live)
VALUES (:client_id, :kind, :format, :discipline_id, :top_n, :live)
ON CONFLICT (client_id, kind, format, discipline_id, top_n) DO UPDATE SET live = EXCLUDED.live
RETURNING id;

-- name: drop_other_feeds
DELETE FROM client_feed WHERE client_id = $1 AND NOT id = ANY($2::bigint[]);

-- name: wake_senders
SELECT pg_notify('omnium_delivery_feed', '');

-- name: list_clients
SELECT c.id::text, c.code, c.name, e.code AS event_code, c.transport, c.enabled, c.settings,
       (SELECT coalesce(array_agg(a.message ORDER BY a.id), '{}') FROM delivery_alert a
         WHERE a.client_id = c.id AND a.status = 'open') AS alerts
  FROM client c JOIN event e ON e.id = c.event_id
 WHERE $1::text IS NULL OR c.code = $1
 ORDER BY c.code;

-- name: client_feeds
SELECT f.id, f.client_id::text, f.kind, f.format, d.code AS discipline, f.top_n, f.version,
       (f.marks > f.built_marks OR f.force) AS owed, e.code AS event_code,
       a.version AS a_version, a.sha256, a.bytes, a.attempts, a.outcome, a.error, a.saved_at,
       a.delivered_at, a.file_name, a.resend
  FROM client_feed f
  JOIN client c ON c.id = f.client_id
  JOIN event e ON e.id = c.event_id
  LEFT JOIN discipline d ON d.id = f.discipline_id
  LEFT JOIN LATERAL (SELECT * FROM delivery_attempt x WHERE x.feed_id = f.id
                      ORDER BY x.id DESC LIMIT 1) a ON true
 WHERE f.client_id = ANY($1::uuid[])
 ORDER BY f.id;

-- name: list_sends
SELECT a.feed_id, c.code AS client_code, a.version AS a_version, a.sha256, a.bytes, a.attempts,
       a.outcome, a.error, a.saved_at, a.delivered_at, a.file_name, a.resend
  FROM delivery_attempt a JOIN client c ON c.id = a.client_id
 WHERE c.code = :client_code AND (:feed_id::bigint = 0 OR a.feed_id = :feed_id)
 ORDER BY a.id DESC
 LIMIT :at_most;

-- name: resend
UPDATE client_feed f SET force = true, due_at = clock_timestamp()
  FROM client c
 WHERE c.id = f.client_id AND c.code = $1 AND ($2::bigint = 0 OR f.id = $2)
RETURNING f.id;

-- name: webhook_of
SELECT settings->'webhook' AS hook FROM client WHERE code = $1 AND transport = 'webhook'
FOR UPDATE;

-- name: set_webhook
UPDATE client SET settings = jsonb_set(settings, '{webhook}', $2::jsonb), updated_at = now()
 WHERE code = $1 AND transport = 'webhook';
