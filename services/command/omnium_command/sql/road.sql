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
SELECT
  (SELECT c.answer FROM command c WHERE c.command_id = $1) AS previous_answer,
  (SELECT c.request_hash FROM command c WHERE c.command_id = $1) AS previous_hash,
  nextval('change_seq') AS seq,
  (SELECT coalesce(jsonb_agg(jsonb_build_object(
            'id', u.id, 'code', u.code, 'event_id', u.event_id,
            'name', u.name, 'phase', u.phase, 'start_at', u.start_at, 'venue', u.venue,
            'status', u.status, 'pinned', u.pinned, 'changed_seq', u.changed_seq,
            'sides', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                         'id', s.id, 'order', s.sort_order, 'competitor_id', s.competitor_id,
                         'score', s.score, 'result', s.result, 'rank', s.rank, 'medal', s.medal,
                         'pinned', s.pinned)), '[]')
                        FROM unit_competitor s WHERE s.unit_id = u.id))), '[]')
     FROM unit u WHERE u.id = ANY($2::uuid[])) AS units,
  (SELECT coalesce(jsonb_agg(jsonb_build_object(
            'id', c.id, 'code', c.code, 'event_id', c.event_id, 'name', c.name, 'noc', c.noc,
            'pinned', c.pinned, 'changed_seq', c.changed_seq)), '[]')
     FROM competitor c WHERE c.id = ANY($3::uuid[])) AS competitors,
  (SELECT coalesce(jsonb_agg(jsonb_build_object(
            'id', m.id, 'event_id', m.event_id, 'gold', m.gold, 'silver', m.silver,
            'bronze', m.bronze, 'total', m.total, 'rank', m.rank, 'pinned', m.pinned,
            'changed_seq', m.changed_seq)), '[]')
     FROM medal_row m WHERE m.id = ANY($4::uuid[])) AS medal_rows,
  (SELECT coalesce(array_agg(c.id::text), '{}') FROM competitor c
    WHERE c.id = ANY($5::uuid[])) AS known_competitors,
  (SELECT e.id::text FROM event e WHERE e.code = $6) AS event_id,
  (SELECT jsonb_build_object('codes', jsonb_object_agg(d.code, d.id))
     FROM discipline d WHERE d.event_id = (SELECT e.id FROM event e WHERE e.code = $6)
  ) AS disciplines,
  (SELECT i.id::text FROM integration i WHERE i.code = $7) AS integration_id,
  (SELECT jsonb_build_object('integration_id', r.integration_id, 'status', r.status,
                          'batch_done', r.batch_done)
     FROM integration_run r WHERE r.id = $8::uuid) AS run;

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
