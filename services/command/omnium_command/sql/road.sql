-- The one road's statements. Each command is: lock, read, write, in one transaction.

-- name: lock_units
-- Match locks, sorted by id, so two writers over the same units always lock in the same order.
SELECT u.id::text AS id, u.code
  FROM unit u
 WHERE u.id = ANY($1::uuid[])
    OR (u.code = ANY($2::text[]) AND u.event_id = (SELECT e.id FROM event e WHERE e.code = $3))
 ORDER BY u.id
   FOR NO KEY UPDATE OF u;

-- name: lock_competitors
SELECT c.id::text AS id, c.code
  FROM competitor c
 WHERE c.id = ANY($1::uuid[])
    OR (c.code = ANY($2::text[]) AND c.event_id = (SELECT e.id FROM event e WHERE e.code = $3))
 ORDER BY c.id
   FOR NO KEY UPDATE OF c;

-- name: lock_medal_rows
-- $2: "<discipline code or empty>:<noc>" for each row; empty discipline = the whole Games table.
SELECT m.id::text AS id, coalesce(d.code, '') || ':' || m.noc AS code
  FROM medal_row m
  LEFT JOIN discipline d ON d.id = m.discipline_id
 WHERE m.event_id = (SELECT e.id FROM event e WHERE e.code = $1)
   AND coalesce(d.code, '') || ':' || m.noc = ANY($2::text[])
 ORDER BY m.id
   FOR NO KEY UPDATE OF m;

-- name: read_state
-- Read after the locks, in a new statement, so it sees what the writer before us committed.
-- Records come back as typed row arrays (no JSON to build and parse).
SELECT
  c.answer AS previous_answer,
  c.request_hash AS previous_hash,
  nextval('change_seq') AS seq,
  (SELECT array_agg(ROW(u.id::text, u.code, u.event_id::text, u.name, u.phase, u.start_at,
                        u.venue, u.status, u.pinned, u.changed_seq))
     FROM unit u WHERE u.id = ANY($2::uuid[])) AS units,
  (SELECT array_agg(ROW(s.unit_id::text, s.id::text, s.sort_order, s.competitor_id::text,
                        s.score, s.result, s.rank, s.medal, s.pinned))
     FROM unit_competitor s WHERE s.unit_id = ANY($2::uuid[])) AS sides,
  (SELECT array_agg(ROW(x.id::text, x.code, x.event_id::text, x.name, x.noc, x.pinned,
                        x.changed_seq))
     FROM competitor x WHERE x.id = ANY($3::uuid[])) AS competitors,
  (SELECT array_agg(ROW(m.id::text, m.event_id::text, m.gold, m.silver, m.bronze, m.total,
                        m.rank, m.pinned, m.changed_seq))
     FROM medal_row m WHERE m.id = ANY($4::uuid[])) AS medal_rows,
  (SELECT array_agg(k.id::text) FROM competitor k WHERE k.id = ANY($5::uuid[]))
    AS known_competitors,
  e.id::text AS event_id,
  (SELECT array_agg(ROW(d.code, d.id::text)) FROM discipline d
    WHERE $9::boolean AND d.event_id = e.id) AS disciplines,
  i.id::text AS integration_id,
  r.integration_id::text AS run_integration_id,
  r.status AS run_status,
  r.batch_done AS run_batch_done
FROM (SELECT 1) AS one
LEFT JOIN command c ON c.command_id = $1
LEFT JOIN event e ON e.code = $6
LEFT JOIN integration i ON i.code = $7
LEFT JOIN integration_run r ON r.id = $8::uuid;

-- name: lock_and_read_units
-- The common case, units only, in one round trip: lock (sorted by id), then read. The reads use
-- the statement's snapshot, taken before any wait for a lock; the road compares each unit's
-- changed_seq as read with the one locked (the newest) and reads again if another writer
-- committed in between. A repeat committed meanwhile is caught when the command row is written.
WITH locked AS MATERIALIZED (
  SELECT u.id, u.code, u.changed_seq
    FROM unit u
   WHERE u.id = ANY($1::uuid[])
      OR (u.code = ANY($2::text[]) AND u.event_id = (SELECT e.id FROM event e WHERE e.code = $3))
   ORDER BY u.id
     FOR NO KEY UPDATE OF u
)
SELECT
  (SELECT array_agg(ROW(l.id::text, l.code, l.changed_seq)) FROM locked l) AS locked,
  c.answer AS previous_answer,
  c.request_hash AS previous_hash,
  nextval('change_seq') AS seq,
  (SELECT array_agg(ROW(u.id::text, u.code, u.event_id::text, u.name, u.phase, u.start_at,
                        u.venue, u.status, u.pinned, u.changed_seq))
     FROM unit u WHERE u.id IN (SELECT l.id FROM locked l)) AS units,
  (SELECT array_agg(ROW(s.unit_id::text, s.id::text, s.sort_order, s.competitor_id::text,
                        s.score, s.result, s.rank, s.medal, s.pinned))
     FROM unit_competitor s WHERE s.unit_id IN (SELECT l.id FROM locked l)) AS sides,
  NULL::record[] AS competitors,
  NULL::record[] AS medal_rows,
  (SELECT array_agg(k.id::text) FROM competitor k WHERE k.id = ANY($5::uuid[]))
    AS known_competitors,
  e.id::text AS event_id,
  NULL::record[] AS disciplines,
  i.id::text AS integration_id,
  r.integration_id::text AS run_integration_id,
  r.status AS run_status,
  r.batch_done AS run_batch_done
FROM (SELECT 1) AS one
LEFT JOIN command c ON c.command_id = $4
LEFT JOIN event e ON e.code = $3
LEFT JOIN integration i ON i.code = $6
LEFT JOIN integration_run r ON r.id = $7::uuid;

-- name: write
-- Every write of one command in one statement: one round trip however much changed.
WITH
unit_updates AS (
  UPDATE unit u SET
    name       = CASE WHEN v.set ? 'name' THEN v.set->>'name' ELSE u.name END,
    phase      = CASE WHEN v.set ? 'phase' THEN coalesce(v.set->>'phase', '') ELSE u.phase END,
    start_at   = CASE WHEN v.set ? 'start_at' THEN (v.set->>'start_at')::timestamptz
                      ELSE u.start_at END,
    venue      = CASE WHEN v.set ? 'venue' THEN v.set->>'venue' ELSE u.venue END,
    status     = CASE WHEN v.set ? 'status' THEN v.set->>'status' ELSE u.status END,
    pinned     = coalesce(v.pinned, u.pinned),
    changed_seq = $1,
    updated_at = now()
  FROM jsonb_to_recordset($2::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE u.id = v.id
  RETURNING u.id
),
side_updates AS (
  UPDATE unit_competitor s SET
    competitor_id = CASE WHEN v.set ? 'competitor_id' THEN (v.set->>'competitor_id')::uuid
                         ELSE s.competitor_id END,
    score  = CASE WHEN v.set ? 'score' THEN v.set->>'score' ELSE s.score END,
    result = CASE WHEN v.set ? 'result' THEN v.set->>'result' ELSE s.result END,
    rank   = CASE WHEN v.set ? 'rank' THEN (v.set->>'rank')::int ELSE s.rank END,
    medal  = CASE WHEN v.set ? 'medal' THEN v.set->>'medal' ELSE s.medal END,
    pinned = coalesce(v.pinned, s.pinned),
    changed_seq = $1
  FROM jsonb_to_recordset($3::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE s.id = v.id
  RETURNING s.id
),
side_inserts AS (
  INSERT INTO unit_competitor
         (unit_id, sort_order, competitor_id, score, result, rank, medal, pinned, changed_seq)
  SELECT v.unit_id, v.sort_order, v.competitor_id, v.score, v.result, v.rank, v.medal,
         coalesce(v.pinned, '{}'), $1
    FROM jsonb_to_recordset($4::jsonb) AS v(unit_id uuid, sort_order int, competitor_id uuid,
         score text, result text, rank int, medal text, pinned text[])
  RETURNING id
),
medal_updates AS (
  UPDATE medal_row m SET
    gold   = CASE WHEN v.set ? 'gold' THEN (v.set->>'gold')::int ELSE m.gold END,
    silver = CASE WHEN v.set ? 'silver' THEN (v.set->>'silver')::int ELSE m.silver END,
    bronze = CASE WHEN v.set ? 'bronze' THEN (v.set->>'bronze')::int ELSE m.bronze END,
    total  = CASE WHEN v.set ? 'total' THEN (v.set->>'total')::int ELSE m.total END,
    rank   = CASE WHEN v.set ? 'rank' THEN (v.set->>'rank')::int ELSE m.rank END,
    pinned = coalesce(v.pinned, m.pinned),
    changed_seq = $1
  FROM jsonb_to_recordset($5::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE m.id = v.id
  RETURNING m.id
),
medal_inserts AS (
  INSERT INTO medal_row (id, event_id, discipline_id, noc, gold, silver, bronze, total, rank,
                         changed_seq)
  SELECT v.id, v.event_id, v.discipline_id, v.noc, coalesce(v.gold, 0), coalesce(v.silver, 0),
         coalesce(v.bronze, 0), coalesce(v.total, 0), v.rank, $1
    FROM jsonb_to_recordset($6::jsonb) AS v(id uuid, event_id uuid, discipline_id uuid,
         noc text, gold int, silver int, bronze int, total int, rank int)
  RETURNING id
),
competitor_updates AS (
  UPDATE competitor c SET
    name   = CASE WHEN v.set ? 'name' THEN v.set->>'name' ELSE c.name END,
    noc    = CASE WHEN v.set ? 'noc' THEN v.set->>'noc' ELSE c.noc END,
    pinned = coalesce(v.pinned, c.pinned),
    changed_seq = $1
  FROM jsonb_to_recordset($7::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE c.id = v.id
  RETURNING c.id
),
timeline AS (
  INSERT INTO timeline_item (command_id, code, event_id, subject_kind, subject_id, unit_ids,
                             actor_kind, actor_name, source_code, screen, payload, diff, seq)
  SELECT $9, $10, t.event_id, t.subject_kind, t.subject_id, coalesce(t.unit_ids, '{}'),
         t.actor_kind, t.actor_name, t.source_code, t.screen, coalesce(t.payload, '{}'),
         coalesce(t.diff, '[]'), $1
    FROM jsonb_to_record($8::jsonb) AS t(event_id uuid, subject_kind text, subject_id uuid,
         unit_ids uuid[], actor_kind text, actor_name text, source_code text, screen text,
         payload jsonb, diff jsonb)
  RETURNING id
),
outbox AS (
  INSERT INTO domain_event (event_id, kind, subject_kind, subject_id, unit_id, seq, command_id,
                            payload)
  SELECT v.event_id, v.kind, v.subject_kind, v.subject_id, v.unit_id, $1, $9, v.payload
    FROM jsonb_to_recordset($11::jsonb) AS v(event_id uuid, kind text, subject_kind text,
         subject_id uuid, unit_id uuid, payload jsonb)
  RETURNING id
),
key_states AS (
  INSERT INTO integration_key_state AS k (integration_id, subject_key, subject_kind, subject_id,
                                          last_hash, applied_seq, last_seen_run, missing_runs)
  SELECT $15::uuid, v.key, v.kind, v.subject_id, decode(v.hash, 'hex'), v.applied_seq,
         $16::uuid, 0
    FROM jsonb_to_recordset($17::jsonb) AS v(key text, kind text, subject_id uuid, hash text,
         applied_seq bigint)
  ON CONFLICT (integration_id, subject_key) DO UPDATE SET
    subject_kind  = EXCLUDED.subject_kind,
    subject_id    = coalesce(EXCLUDED.subject_id, k.subject_id),
    last_hash     = EXCLUDED.last_hash,
    applied_seq   = EXCLUDED.applied_seq,
    last_seen_run = EXCLUDED.last_seen_run,
    missing_runs  = 0
  RETURNING 1
),
row_log AS (
  INSERT INTO integration_row (run_id, integration_id, batch_no, position, subject_key,
                               subject_kind, subject_id, row_hash, outcome, reason, diff,
                               kept_by_hand)
  SELECT $16::uuid, $15::uuid, $19, v.position, v.key, v.kind, v.subject_id,
         decode(v.hash, 'hex'), v.outcome, v.reason, coalesce(v.diff, '[]'),
         coalesce(v.kept, '[]')
    FROM jsonb_to_recordset($18::jsonb) AS v(position int, key text, kind text, subject_id uuid,
         hash text, outcome text, reason text, diff jsonb, kept jsonb)
  RETURNING 1
),
run AS (
  UPDATE integration_run r SET
    batch_done = r.batch_done + 1,
    status = CASE WHEN r.status = 'received' THEN 'applying' ELSE r.status END
  WHERE r.id = $16::uuid
  RETURNING r.batch_done
),
recorded AS (
  INSERT INTO command (command_id, code, source_code, request_hash, outcome, answer, seq)
  VALUES ($9, $10, $12, $13, 'accepted', $14, $1)
  ON CONFLICT (command_id) DO NOTHING
  RETURNING 1
)
SELECT (SELECT count(*) FROM recorded) AS recorded,
       (SELECT batch_done FROM run) AS batch_done;
