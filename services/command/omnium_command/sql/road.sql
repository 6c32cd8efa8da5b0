-- The one road's statements. A command is two statements: read, then write.
--
-- The read takes no lock. The write is one statement, so one transaction: it takes the locks
-- (sorted by id, FOR NO KEY UPDATE), checks that every record still has the changed_seq the
-- read saw (so the diff was made against current values), records the command id (a repeat
-- writes nothing) and only then writes. If a record changed in between, it writes nothing
-- and the road does it again the careful way: locks first (in a transaction), then read and
-- write, which cannot be overtaken.

-- name: read
-- The road leaves out the parts a command names nothing for (QUERIES.compose); the columns
-- of a part left out read as NULL. Records come as arrays of the road_* row types (migration
-- 0018), read by field name: binary on the wire, with no JSON to build or to parse.
WITH
one AS MATERIALIZED (SELECT nextval('change_seq') AS seq)
-- part: units
-- By id, then by code (only when codes are given): two index scans, where an OR of the two
-- made a bitmap scan of both, or a sequential scan of competitor, on every command.
, units AS MATERIALIZED (
  SELECT u.* FROM unit u WHERE u.id = ANY(:unit_ids::uuid[])
  UNION ALL
  SELECT u.* FROM unit u
   WHERE cardinality(:unit_codes::text[]) > 0 AND u.code = ANY(:unit_codes::text[])
     AND u.event_id = (SELECT e.id FROM event e WHERE e.code = :event_code)
     AND u.id <> ALL(:unit_ids::uuid[])
)
-- end part
-- part: competitors
, competitors AS MATERIALIZED (
  SELECT c.* FROM competitor c WHERE c.id = ANY(:competitor_ids::uuid[])
  UNION ALL
  SELECT c.* FROM competitor c
   WHERE cardinality(:competitor_codes::text[]) > 0
     AND c.code = ANY(:competitor_codes::text[])
     AND c.event_id = (SELECT e.id FROM event e WHERE e.code = :event_code)
     AND c.id <> ALL(:competitor_ids::uuid[])
)
-- end part
-- part: medal_rows
-- :medal_refs: "<discipline code or empty>:<noc>" per row; an empty discipline is the whole
-- Games table.
, medal_rows AS MATERIALIZED (
  SELECT m.*, coalesce(d.code, '') || ':' || m.noc AS ref
    FROM medal_row m
    LEFT JOIN discipline d ON d.id = m.discipline_id
   WHERE m.event_id = (SELECT e.id FROM event e WHERE e.code = :event_code)
     AND coalesce(d.code, '') || ':' || m.noc = ANY(:medal_refs::text[])
)
-- end part
SELECT
  c.answer AS previous_answer,
  c.request_hash AS previous_hash,
  one.seq,
-- part: units
  (SELECT array_agg(ROW(u.id::text, u.code, u.event_id::text, u.name, u.phase, u.start_at,
                        u.venue, u.status, u.pinned, u.changed_seq, u.match_seq)::road_unit)
     FROM units u) AS units,
  (SELECT array_agg(ROW(s.unit_id::text, s.id::text, s.sort_order, s.competitor_id::text,
                        s.score, s.result, s.rank, s.medal, s.pinned)::road_side)
     FROM unit_competitor s WHERE s.unit_id IN (SELECT u.id FROM units u)) AS sides,
-- end part
-- part: competitors
  (SELECT array_agg(ROW(x.id::text, x.code, x.event_id::text, x.name, x.noc, x.pinned,
                        x.changed_seq)::road_competitor)
     FROM competitors x) AS competitors,
-- end part
-- part: medal_rows
  (SELECT array_agg(ROW(m.id::text, m.ref, m.event_id::text, m.gold, m.silver, m.bronze,
                        m.total, m.rank, m.pinned, m.changed_seq)::road_medal_row)
     FROM medal_rows m) AS medal_rows,
-- end part
-- part: known_competitors
  (SELECT array_agg(k.id::text) FROM competitor k
    WHERE k.id = ANY(:referenced_competitors::uuid[])) AS known_competitors,
-- end part
-- part: known_nocs
-- The NOCs the medal rows name (:medal_refs) that the event knows: some competitor of it is
-- from one.
  (SELECT array_agg(DISTINCT k.noc) FROM competitor k
    WHERE k.event_id = e.id
      AND k.noc = ANY(SELECT split_part(m.ref, ':', 2)
                        FROM unnest(:medal_refs::text[]) AS m(ref)))
    AS known_nocs,
-- end part
-- part: disciplines
  (SELECT json_object_agg(d.code, d.id::text) FROM discipline d WHERE d.event_id = e.id)
    AS disciplines,
-- end part
-- part: batch
  i.id::text AS integration_id,
  r.integration_id::text AS run_integration_id,
  r.status AS run_status,
  r.batch_done AS run_batch_done,
-- end part
  e.id::text AS event_id
FROM one
LEFT JOIN command c ON c.command_id = :command_id
LEFT JOIN event e ON e.code = :event_code
-- part: batch
LEFT JOIN integration i ON i.code = :integration_code
LEFT JOIN integration_run r ON r.id = :run_id::uuid
-- end part
;

-- name: lock
-- Under contention the road takes the locks first, in a transaction, then reads and writes.
-- Same order as the write's: units, competitors, medal rows, each sorted by id.
WITH
u AS MATERIALIZED (SELECT x.id FROM unit x WHERE x.id = ANY(:unit_ids::uuid[])
                    ORDER BY x.id FOR NO KEY UPDATE OF x),
c AS MATERIALIZED (SELECT x.id FROM competitor x WHERE x.id = ANY(:competitor_ids::uuid[])
                    ORDER BY x.id FOR NO KEY UPDATE OF x),
m AS MATERIALIZED (SELECT x.id FROM medal_row x WHERE x.id = ANY(:medal_row_ids::uuid[])
                    ORDER BY x.id FOR NO KEY UPDATE OF x)
SELECT (SELECT count(*) FROM u) AS units, (SELECT count(*) FROM c) AS competitors,
       (SELECT count(*) FROM m) AS medal_rows;

-- name: confirmed_answer
-- The first answer to a command id, for a repeat. Run in a transaction: the row lock writes
-- WAL under a transaction id, so the COMMIT waits for the synchronous standby (a transaction
-- that wrote nothing commits without waiting, even with an id), and once it has committed
-- the standby has the command's record too. KEY SHARE blocks no reader and no other repeat.
SELECT answer, request_hash FROM command WHERE command_id = $1 FOR KEY SHARE;

-- name: write
-- Every write of one command in one statement: one round trip, one transaction. The road
-- leaves out the parts a command has nothing for (QUERIES.compose): PostgreSQL then opens
-- only the tables and indexes this command writes.
--
-- Units it writes are locked; units it only read (an import's unchanged rows) are checked
-- without a lock: nothing of theirs is written, so there is no update to lose and no other
-- writer to wait for, and a row lock would dirty their pages (and the WAL) for nothing.
WITH
-- part: unit_checks
unit_checks AS MATERIALIZED (
  SELECT u.id, u.changed_seq FROM unit u WHERE u.id = ANY(:checked_unit_ids::uuid[])
),
-- end part
-- part: unit_locks
unit_locks AS MATERIALIZED (
  SELECT u.id, u.changed_seq FROM unit u
   WHERE u.id = ANY(:locked_unit_ids::uuid[]) ORDER BY u.id FOR NO KEY UPDATE OF u
),
-- end part
-- part: competitor_locks
competitor_locks AS MATERIALIZED (
  SELECT c.id, c.changed_seq FROM competitor c
   WHERE c.id = ANY(:competitor_ids::uuid[]) ORDER BY c.id FOR NO KEY UPDATE OF c
),
-- end part
-- part: medal_locks
medal_locks AS MATERIALIZED (
  SELECT m.id, m.changed_seq FROM medal_row m
   WHERE m.id = ANY(:medal_row_ids::uuid[]) ORDER BY m.id FOR NO KEY UPDATE OF m
),
-- end part
-- Locked rows show their newest version: equal to what the read saw, or the diff is stale.
guard AS MATERIALIZED (
  SELECT true
-- part: unit_checks
     AND (SELECT count(*) FROM unit_checks l
            JOIN unnest(:checked_unit_ids::uuid[], :checked_unit_seqs::bigint[]) AS v(id, seq)
              ON v.id = l.id AND v.seq = l.changed_seq)
         = cardinality(:checked_unit_ids::uuid[])
-- end part
-- part: unit_locks
     AND (SELECT count(*) FROM unit_locks l
            JOIN unnest(:locked_unit_ids::uuid[], :locked_unit_seqs::bigint[]) AS v(id, seq)
              ON v.id = l.id AND v.seq = l.changed_seq)
         = cardinality(:locked_unit_ids::uuid[])
-- end part
-- part: competitor_locks
     AND (SELECT count(*) FROM competitor_locks l
            JOIN unnest(:competitor_ids::uuid[], :competitor_seqs::bigint[]) AS v(id, seq)
              ON v.id = l.id AND v.seq = l.changed_seq)
         = cardinality(:competitor_ids::uuid[])
-- end part
-- part: medal_locks
     AND (SELECT count(*) FROM medal_locks l
            JOIN unnest(:medal_row_ids::uuid[], :medal_row_seqs::bigint[]) AS v(id, seq)
              ON v.id = l.id AND v.seq = l.changed_seq)
         = cardinality(:medal_row_ids::uuid[])
-- end part
     AS current
),
-- The command id first: every other write below happens only if this row was written.
recorded AS (
  INSERT INTO command (command_id, code, source_code, request_hash, outcome, answer, seq)
  SELECT :command_id, :code, :source_code, :request_hash, 'accepted', :answer, :seq
   WHERE (SELECT g.current FROM guard g)
  ON CONFLICT (command_id) DO NOTHING
  RETURNING 1
),
go AS MATERIALIZED (SELECT EXISTS (SELECT 1 FROM recorded) AS go),
-- part: unit_inserts
unit_inserts AS (
  INSERT INTO unit (id, event_id, discipline_id, code, name, phase, start_at, venue, status,
                    changed_seq)
  SELECT v.id, v.event_id, v.discipline_id, v.code, v.name, coalesce(v.phase, ''),
         v.start_at, v.venue, coalesce(v.status, 'SCHEDULED'), :seq
    FROM jsonb_to_recordset(:unit_inserts::jsonb)
         AS v(id uuid, event_id uuid, discipline_id uuid, code text, name text, phase text,
              start_at timestamptz, venue text, status text)
   WHERE (SELECT go FROM go)
  RETURNING id
),
-- end part
-- part: unit_updates
unit_updates AS (
  UPDATE unit u SET
    name       = CASE WHEN v.set ? 'name' THEN v.set->>'name' ELSE u.name END,
    phase      = CASE WHEN v.set ? 'phase' THEN coalesce(v.set->>'phase', '') ELSE u.phase END,
    start_at   = CASE WHEN v.set ? 'start_at' THEN (v.set->>'start_at')::timestamptz
                      ELSE u.start_at END,
    venue      = CASE WHEN v.set ? 'venue' THEN v.set->>'venue' ELSE u.venue END,
    status     = CASE WHEN v.set ? 'status' THEN v.set->>'status' ELSE u.status END,
    match_state = CASE WHEN v.set ? 'match_state' THEN v.set->'match_state'
                       ELSE u.match_state END,
    match_seq  = CASE WHEN v.set ? 'match_seq' THEN (v.set->>'match_seq')::int
                      ELSE u.match_seq END,
    pinned     = coalesce(v.pinned, u.pinned),
    changed_seq = :seq,
    updated_at = now()
  FROM jsonb_to_recordset(:unit_updates::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE u.id = v.id AND (SELECT go FROM go)
  RETURNING u.id
),
-- end part
-- part: side_updates
side_updates AS (
  UPDATE unit_competitor s SET
    competitor_id = CASE WHEN v.set ? 'competitor_id' THEN (v.set->>'competitor_id')::uuid
                         ELSE s.competitor_id END,
    score  = CASE WHEN v.set ? 'score' THEN v.set->>'score' ELSE s.score END,
    result = CASE WHEN v.set ? 'result' THEN v.set->>'result' ELSE s.result END,
    rank   = CASE WHEN v.set ? 'rank' THEN (v.set->>'rank')::int ELSE s.rank END,
    medal  = CASE WHEN v.set ? 'medal' THEN v.set->>'medal' ELSE s.medal END,
    pinned = coalesce(v.pinned, s.pinned),
    changed_seq = :seq
  FROM jsonb_to_recordset(:side_updates::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE s.id = v.id AND (SELECT go FROM go)
  RETURNING s.id
),
-- end part
-- part: side_inserts
side_inserts AS (
  INSERT INTO unit_competitor
         (unit_id, sort_order, competitor_id, score, result, rank, medal, pinned, changed_seq)
  SELECT v.unit_id, v.sort_order, v.competitor_id, v.score, v.result, v.rank, v.medal,
         coalesce(v.pinned, '{}'), :seq
    FROM jsonb_to_recordset(:side_inserts::jsonb)
         AS v(unit_id uuid, sort_order int, competitor_id uuid, score text, result text,
              rank int, medal text, pinned text[])
   WHERE (SELECT go FROM go)
  RETURNING id
),
-- end part
-- part: medal_updates
medal_updates AS (
  UPDATE medal_row m SET
    gold   = CASE WHEN v.set ? 'gold' THEN (v.set->>'gold')::int ELSE m.gold END,
    silver = CASE WHEN v.set ? 'silver' THEN (v.set->>'silver')::int ELSE m.silver END,
    bronze = CASE WHEN v.set ? 'bronze' THEN (v.set->>'bronze')::int ELSE m.bronze END,
    total  = CASE WHEN v.set ? 'total' THEN (v.set->>'total')::int ELSE m.total END,
    rank   = CASE WHEN v.set ? 'rank' THEN (v.set->>'rank')::int ELSE m.rank END,
    pinned = coalesce(v.pinned, m.pinned),
    changed_seq = :seq,
    updated_at = now()
  FROM jsonb_to_recordset(:medal_updates::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE m.id = v.id AND (SELECT go FROM go)
  RETURNING m.id
),
-- end part
-- part: medal_inserts
medal_inserts AS (
  INSERT INTO medal_row (id, event_id, discipline_id, noc, gold, silver, bronze, total, rank,
                         changed_seq)
  SELECT v.id, v.event_id, v.discipline_id, v.noc, coalesce(v.gold, 0), coalesce(v.silver, 0),
         coalesce(v.bronze, 0), coalesce(v.total, 0), v.rank, :seq
    FROM jsonb_to_recordset(:medal_inserts::jsonb)
         AS v(id uuid, event_id uuid, discipline_id uuid, noc text, gold int, silver int,
              bronze int, total int, rank int)
   WHERE (SELECT go FROM go)
  RETURNING id
),
-- end part
-- part: competitor_updates
competitor_updates AS (
  UPDATE competitor c SET
    name   = CASE WHEN v.set ? 'name' THEN v.set->>'name' ELSE c.name END,
    noc    = CASE WHEN v.set ? 'noc' THEN v.set->>'noc' ELSE c.noc END,
    pinned = coalesce(v.pinned, c.pinned),
    changed_seq = :seq
  FROM jsonb_to_recordset(:competitor_updates::jsonb) AS v(id uuid, set jsonb, pinned text[])
  WHERE c.id = v.id AND (SELECT go FROM go)
  RETURNING c.id
),
-- end part
-- part: outbox
outbox AS (
  INSERT INTO domain_event (event_id, kind, subject_kind, subject_id, unit_id, seq, command_id,
                            payload, trace_context)
  SELECT v.event_id, v.kind, v.subject_kind, v.subject_id, v.unit_id, :seq, :command_id,
         v.payload, :trace_context::text
    FROM jsonb_to_recordset(:outbox::jsonb) AS v(event_id uuid, kind text, subject_kind text,
         subject_id uuid, unit_id uuid, payload jsonb)
   WHERE (SELECT go FROM go)
  RETURNING id
),
-- end part
-- part: key_states
key_states AS (
  INSERT INTO integration_key_state AS k (integration_id, subject_key, subject_kind, subject_id,
                                          last_hash, applied_seq, last_seen_run, missing_runs)
  SELECT :integration_id::uuid, v.key, v.kind, v.subject_id, v.hash, v.applied_seq,
         :run_id::uuid, 0
    FROM unnest(:key_state_keys::text[], :key_state_kinds::text[],
                :key_state_subject_ids::uuid[], :key_state_hashes::bytea[],
                :key_state_applied_seqs::bigint[])
         AS v(key, kind, subject_id, hash, applied_seq)
   WHERE (SELECT go FROM go)
  ON CONFLICT (integration_id, subject_key) DO UPDATE SET
    subject_kind  = EXCLUDED.subject_kind,
    subject_id    = coalesce(EXCLUDED.subject_id, k.subject_id),
    last_hash     = EXCLUDED.last_hash,
    applied_seq   = EXCLUDED.applied_seq,
    last_seen_run = EXCLUDED.last_seen_run,
    missing_runs  = 0
  RETURNING 1
),
-- end part
-- part: row_log
row_log AS (
  INSERT INTO integration_row (run_id, integration_id, batch_no, position, subject_key,
                               subject_kind, subject_id, row_hash, outcome, reason, diff,
                               kept_by_hand)
  SELECT :run_id::uuid, :integration_id::uuid, :batch_no, v.position, v.key, v.kind,
         v.subject_id,
         decode(v.hash, 'hex'), v.outcome, v.reason, coalesce(v.diff, '[]'),
         coalesce(v.kept, '[]')
    FROM jsonb_to_recordset(:row_log::jsonb)
         AS v(position int, key text, kind text, subject_id uuid, hash text, outcome text,
              reason text, diff jsonb, kept jsonb)
   WHERE (SELECT go FROM go)
  RETURNING 1
),
-- end part
-- A scorer's or provider's action (scoring.act), and the action an undo takes back.
-- part: match_actions
match_actions AS (
  INSERT INTO match_action (unit_id, seq, command_id, kind, side, fields, undoes, actor_kind,
                            actor_name, source_code, screen, client_at)
  SELECT v.unit_id, v.seq, :command_id, v.kind, v.side, coalesce(v.fields, '{}'), v.undoes,
         t.actor_kind, t.actor_name, t.source_code, t.screen, v.client_at
    FROM jsonb_to_recordset(:match_actions::jsonb)
         AS v(unit_id uuid, seq int, kind text, side int, fields jsonb, undoes int,
              client_at timestamptz)
   CROSS JOIN jsonb_to_record(:timeline::jsonb) AS t(actor_kind text, actor_name text,
         source_code text, screen text)
   WHERE (SELECT go FROM go)
  RETURNING 1
),
-- end part
-- part: match_undos
match_undos AS (
  UPDATE match_action a SET undone_by = v.seq
    FROM jsonb_to_recordset(:match_actions::jsonb) AS v(unit_id uuid, seq int, undoes int)
   WHERE a.unit_id = v.unit_id AND a.seq = v.undoes AND (SELECT go FROM go)
  RETURNING 1
),
-- end part
-- part: run
run AS (
  UPDATE integration_run r SET
    batch_done = r.batch_done + 1,
    status = CASE WHEN r.status = 'received' THEN 'applying' ELSE r.status END
  WHERE r.id = :run_id::uuid AND (SELECT go FROM go)
  RETURNING r.batch_done
),
-- end part
timeline AS (
  INSERT INTO timeline_item (command_id, code, event_id, subject_kind, subject_id, unit_ids,
                             actor_kind, actor_name, source_code, screen, payload, diff, seq)
  SELECT :command_id, :code, t.event_id, t.subject_kind, t.subject_id,
         coalesce(t.unit_ids, '{}'), t.actor_kind, t.actor_name, t.source_code, t.screen,
         coalesce(t.payload, '{}'), coalesce(t.diff, '[]'), :seq
    FROM jsonb_to_record(:timeline::jsonb)
         AS t(event_id uuid, subject_kind text, subject_id uuid, unit_ids uuid[], actor_kind text,
              actor_name text, source_code text, screen text, payload jsonb, diff jsonb)
   WHERE (SELECT go FROM go)
  RETURNING id
)
SELECT (SELECT g.current FROM guard g) AS current,
       (SELECT go FROM go) AS recorded;
