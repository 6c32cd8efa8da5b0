-- Key state: what an integration last saw and wrote, per key.

-- name: load_key_state
SELECT subject_key, subject_id::text AS subject_id, last_hash, applied_seq, missing_runs,
       missing_answered
  FROM integration_key_state
 WHERE integration_id = $1::uuid;

-- name: changed_units_since
-- The fast path's one question: which of this event's units changed since the last look, by
-- changed_seq, or written by a transaction that was still open at the last look (a command
-- takes its changed_seq before it commits, so a late commit can carry a number below the
-- watermark). Both are indexed; the cost grows with what changed, not with how many keys a
-- run lists.
SELECT id::text AS id, changed_seq
  FROM unit
 WHERE (changed_seq > :watermark OR updated_at > :since)
   AND event_id = (SELECT event_id FROM integration WHERE id = :integration_id::uuid);

-- name: changed_medal_rows_since
SELECT id::text AS id, changed_seq
  FROM medal_row
 WHERE (changed_seq > :watermark OR updated_at > :since)
   AND event_id = (SELECT event_id FROM integration WHERE id = :integration_id::uuid);

-- name: look_now
-- Taken before the read of changes, in its own statement: the sequence's value, the clock, and
-- when the oldest transaction still open began. A change not yet committed at this look was
-- written by one of those transactions, so it has updated_at at or after `oldest`.
-- Sessions of other roles are hidden without pg_read_all_stats: then `hidden` says so and the
-- cache falls back to a fixed window (fastpath_blind_seconds).
SELECT (SELECT last_value FROM change_seq) AS seq,
       clock_timestamp() AS at,
       (SELECT min(a.xact_start) FROM pg_stat_activity a
         WHERE a.xact_start IS NOT NULL AND a.pid <> pg_backend_pid()) AS oldest,
       (SELECT count(*) FROM pg_stat_activity a
         WHERE a.query = '<insufficient privilege>')
         AS hidden;

-- name: touched_units
-- At load: the keys whose unit someone changed after this integration wrote it.
SELECT k.subject_id::text AS subject_id
  FROM integration_key_state k
  JOIN unit u ON u.id = k.subject_id
 WHERE k.integration_id = $1::uuid AND u.changed_seq IS DISTINCT FROM k.applied_seq;

-- name: touched_medal_rows
SELECT k.subject_id::text AS subject_id
  FROM integration_key_state k
  JOIN medal_row m ON m.id = k.subject_id
 WHERE k.integration_id = $1::uuid AND m.changed_seq IS DISTINCT FROM k.applied_seq;

-- name: fill_from_row_log
-- Once, for an integration that has a row log but no key state yet: the newest logged row of
-- each key, with no applied_seq, so nothing is skipped until the next write sets it.
INSERT INTO integration_key_state (integration_id, subject_key, subject_kind, subject_id,
                                   last_hash, last_seen_run)
SELECT DISTINCT ON (r.subject_key)
       r.integration_id, r.subject_key, r.subject_kind, r.subject_id, r.row_hash, r.run_id
  FROM integration_row r
 WHERE r.integration_id = $1::uuid
   AND NOT EXISTS (SELECT 1 FROM integration_key_state k WHERE k.integration_id = $1::uuid)
 ORDER BY r.subject_key, r.id DESC
ON CONFLICT DO NOTHING;

-- name: mark_official
-- Keys whose row says official for the first time open their settle window.
UPDATE integration_key_state
   SET official_at = :official_at, next_read_at = :next_read_at
 WHERE integration_id = :integration_id::uuid AND subject_key = ANY(:subject_keys::text[])
   AND official_at IS NULL;

-- name: settle_listed
-- A page run read these keys again: each moves on to its next read (or leaves the window).
UPDATE integration_key_state AS k
   SET next_read_at = v.next_read_at, read_asked_at = NULL
  FROM unnest(:subject_keys::text[], :next_reads::timestamptz[]) AS v(subject_key, next_read_at)
 WHERE k.integration_id = :integration_id::uuid AND k.subject_key = v.subject_key;

-- name: settling
SELECT subject_key, official_at FROM integration_key_state
 WHERE integration_id = $1::uuid AND subject_key = ANY($2::text[]) AND official_at IS NOT NULL;

-- name: trim_row_log
DELETE FROM integration_row WHERE created_at < now() - make_interval(days => $1);
