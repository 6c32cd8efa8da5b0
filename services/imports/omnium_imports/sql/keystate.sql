-- Key state: what an integration last saw and wrote, per key (Section 3 seed, K1 and K2).

-- name: load_key_state
SELECT subject_key, subject_id::text AS subject_id, last_hash, applied_seq, missing_runs
  FROM integration_key_state
 WHERE integration_id = $1::uuid;

-- name: changed_units_since
-- The fast path's one question, answered by unit_by_changed_seq: which of this event's units
-- changed since the watermark. Its cost grows with what changed, not with the run's size.
SELECT id::text AS id, changed_seq
  FROM unit
 WHERE changed_seq > $2 AND event_id = (SELECT event_id FROM integration WHERE id = $1::uuid);

-- name: changed_medal_rows_since
SELECT id::text AS id, changed_seq
  FROM medal_row
 WHERE changed_seq > $2 AND event_id = (SELECT event_id FROM integration WHERE id = $1::uuid);

-- name: current_seq
SELECT last_value FROM change_seq;

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
