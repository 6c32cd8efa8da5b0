-- Claiming clients, building their feeds and recording every send.

-- name: claim_clients
-- Clients with a feed due, not held by another copy (SKIP LOCKED, then a lease), and not one
-- this copy is already working.
UPDATE client c SET leased_by = :copy, lease_until = clock_timestamp() + make_interval(secs => :lease_seconds::float8)
 WHERE c.id IN (
   SELECT x.id FROM client x
    WHERE x.enabled AND NOT x.id = ANY(:busy_client_ids::uuid[])
      AND (x.lease_until IS NULL OR x.lease_until < clock_timestamp() OR x.leased_by = :copy)
      AND EXISTS (SELECT 1 FROM client_feed f
                   WHERE f.client_id = x.id AND (f.marks > f.built_marks OR f.force)
                     AND f.due_at <= clock_timestamp())
    ORDER BY x.id
    FOR UPDATE SKIP LOCKED
    LIMIT :at_most)
RETURNING c.id::text, c.code, c.name, c.transport, c.settings, c.event_id::text,
          (SELECT e.code FROM event e WHERE e.id = c.event_id) AS event_code;

-- name: renew_client
UPDATE client SET lease_until = clock_timestamp() + make_interval(secs => :lease_seconds::float8)
 WHERE id = :client_id AND leased_by = :copy
RETURNING id;

-- name: release_client
UPDATE client SET lease_until = NULL, leased_by = NULL WHERE id = $1 AND leased_by = $2;

-- name: release_clients
-- A graceful stop: every client this copy holds but those it is still sending to ($2), free at
-- once for the other copies.
WITH released AS (
  UPDATE client SET lease_until = NULL, leased_by = NULL
   WHERE leased_by = $1 AND NOT id = ANY($2::uuid[])
  RETURNING id
)
SELECT count(*) FROM released;

-- name: due_feeds
SELECT f.id, f.kind, f.format, f.discipline_id::text, d.code AS discipline, f.top_n, f.live,
       f.marks, f.wanted_id, f.force, f.version, f.content_sha, f.delivered_content_sha
  FROM client_feed f
  LEFT JOIN discipline d ON d.id = f.discipline_id
 WHERE f.client_id = $1 AND (f.marks > f.built_marks OR f.force)
   AND f.due_at <= clock_timestamp()
 ORDER BY f.id;

-- name: units
-- Units of a Games (or one discipline), with their sides and who is on each side.
SELECT u.id::text, u.code, d.code AS discipline, u.name, u.phase, u.start_at, u.venue, u.status,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                  'order', s.sort_order, 'competitor_id', s.competitor_id, 'score', s.score,
                  'result', s.result, 'rank', s.rank, 'medal', s.medal,
                  'competitor', c.code, 'name', c.name, 'noc', c.noc) ORDER BY s.sort_order)
                   FROM unit_competitor s LEFT JOIN competitor c ON c.id = s.competitor_id
                  WHERE s.unit_id = u.id), '[]') AS sides
  FROM unit u
  JOIN discipline d ON d.id = u.discipline_id
 WHERE u.event_id = :event_id AND (:discipline_id::uuid IS NULL OR u.discipline_id = :discipline_id)
   -- :only_results: only units that have results (started, or a side with a score or result).
   AND (NOT :only_results OR u.status IN ('RUNNING', 'INTERRUPTED', 'UNOFFICIAL', 'OFFICIAL', 'PROTESTED')
        OR EXISTS (SELECT 1 FROM unit_competitor s WHERE s.unit_id = u.id
                    AND (s.score IS NOT NULL OR s.result IS NOT NULL)))
 ORDER BY u.start_at NULLS LAST, u.code;

-- name: approved_units
-- The checker step: each unit's newest approval, as the person approved it.
SELECT DISTINCT ON (a.unit_id) a.unit_id::text, a.payload
  FROM domain_event a
  JOIN unit u ON u.id = a.unit_id
 WHERE a.event_id = $1 AND a.kind = 'results.approved'
   AND ($2::uuid IS NULL OR u.discipline_id = $2)
 ORDER BY a.unit_id, a.id DESC;

-- name: competitors
SELECT id::text, code, name, noc, kind FROM competitor WHERE id = ANY($1::uuid[]);

-- name: medals_held
-- The checker step for a medal table feed: whether a unit of its scope (:discipline_id: a
-- discipline, or null: the whole Games) held by this client's checker (:held_disciplines: the
-- disciplines held; :holds_every: every one) shows a medal its newest approval does not (migration
-- 0022, the public table's rule).
SELECT client_medals_held(:event_id, :discipline_id::uuid, :held_disciplines::text[], :holds_every);

-- name: held_feed
-- A feed that waits for the checker (a held medal table): nothing sent, the client keeps the
-- version it has; built up to mark :marks (outbox id :outbox_id), so only a new change (an
-- approval, a medal) or the sweep builds it again; changes that came in while it was built open a
-- new window (:window_seconds). A resend asked for meanwhile is dropped with it: it would meet the
-- same wait.
UPDATE client_feed SET built_marks = greatest(built_marks, :marks), built_id = greatest(built_id, :outbox_id),
  force = false,
  due_at = CASE WHEN marks > greatest(built_marks, :marks)
                THEN clock_timestamp() + make_interval(secs => :window_seconds::float8) ELSE NULL END
 WHERE id = :feed_id;

-- name: medal_rows
-- A row with no medal is not in the table (medals.withdraw_row takes a NOC's last medal away).
SELECT m.noc, m.gold, m.silver, m.bronze, m.total, m.rank
  FROM medal_row m
 WHERE m.event_id = :event_id AND m.discipline_id IS NOT DISTINCT FROM :discipline_id::uuid AND m.total > 0
 ORDER BY m.rank NULLS LAST, m.gold DESC, m.silver DESC, m.bronze DESC, m.noc
 LIMIT :at_most;

-- name: new_version
-- Version only goes up: a new content gets the next number (:is_new: it is new), before it is sent.
-- Answers when the newest change it carries (:outbox_id) was saved, and that change's trace (the
-- send continues it).
WITH bumped AS (
  UPDATE client_feed SET version = :version, content_sha = :content_sha WHERE id = :feed_id AND :is_new RETURNING id
)
SELECT d.saved_at, d.trace_context, (SELECT count(*) FROM bumped) AS bumped
  FROM (SELECT 1) one
  LEFT JOIN domain_event d ON d.id = :outbox_id;

-- name: unchanged
-- Same bytes as the last good send: nothing to send, the feed is current up to mark :marks (outbox
-- id :outbox_id). Changes that came in while it was built open a new window (:window_seconds).
UPDATE client_feed SET
  built_marks = greatest(built_marks, :marks), built_id = greatest(built_id, :outbox_id), force = false,
  due_at = CASE WHEN marks > greatest(built_marks, :marks)
                THEN clock_timestamp() + make_interval(secs => :window_seconds::float8) ELSE NULL END
 WHERE id = :feed_id;

-- name: record_send
-- One send: its row, and the feed's state. Delivered: current up to mark :marks (outbox id
-- :outbox_id) and the client's open send alerts cleared (the promise's alert is cleared by the
-- promise check, once the window is good again). Failed or refused: still owed, tried again
-- after :retry_seconds.
WITH cleared AS (
  UPDATE delivery_alert SET status = 'cleared', cleared_at = now()
   WHERE client_id = :client_id AND status = 'open' AND kind <> 'promise'
     AND :outcome = 'delivered'
  RETURNING id
),
attempt AS (
  INSERT INTO delivery_attempt (client_id, feed_id, version, file_name, sha256, bytes, attempts,
                                outcome, error, outbox_id, saved_at, delivered_at, resend)
  VALUES (:client_id, :feed_id, :version, :file_name, :sha256, :bytes, :attempts,
          :outcome, :error, :outbox_id, :saved_at, :delivered_at, :resend)
  RETURNING id
)
UPDATE client_feed f SET
  built_marks = CASE WHEN :outcome = 'delivered' THEN greatest(f.built_marks, :marks)
                     ELSE f.built_marks END,
  built_id = CASE WHEN :outcome = 'delivered' THEN greatest(f.built_id, :outbox_id)
                  ELSE f.built_id END,
  force = CASE WHEN :outcome = 'delivered' THEN false ELSE f.force END,
  due_at = CASE
    WHEN :outcome <> 'delivered'
      THEN clock_timestamp() + make_interval(secs => :retry_seconds::float8)
    WHEN f.marks > greatest(f.built_marks, :marks)
      THEN clock_timestamp() + make_interval(secs => :window_seconds::float8)
    ELSE NULL END,
  delivered_version = CASE WHEN :outcome = 'delivered' THEN :version
                           ELSE f.delivered_version END,
  delivered_content_sha = CASE WHEN :outcome = 'delivered' THEN :content_sha
                               ELSE f.delivered_content_sha END,
  delivered_sha256 = CASE WHEN :outcome = 'delivered' THEN :sha256 ELSE f.delivered_sha256 END,
  delivered_at = CASE WHEN :outcome = 'delivered' THEN :delivered_at ELSE f.delivered_at END
 WHERE f.id = :feed_id
RETURNING (SELECT id FROM attempt), (SELECT count(*) FROM cleared) AS cleared;

-- name: postpone_client
-- The client could not be reached: its other due feeds wait as long as the failed one.
UPDATE client_feed SET due_at = clock_timestamp() + make_interval(secs => $2::float8)
 WHERE client_id = $1 AND (marks > built_marks OR force);

-- name: raise_alert
INSERT INTO delivery_alert (client_id, kind, message) VALUES (:client_id, :kind, :message)
ON CONFLICT (client_id, kind) WHERE status = 'open' DO NOTHING
RETURNING id;

-- name: alert_sent
UPDATE delivery_alert SET sent_at = now() WHERE id = $1;

-- name: trim_attempts
-- Sends older than $1 days, but never a feed's newest (ListClients' "last received").
WITH gone AS (
  DELETE FROM delivery_attempt a
   WHERE a.finished_at < now() - make_interval(days => $1)
     AND a.id < (SELECT max(b.id) FROM delivery_attempt b WHERE b.feed_id = a.feed_id)
  RETURNING 1
)
SELECT count(*)::int FROM gone;
