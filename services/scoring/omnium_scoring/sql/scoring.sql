-- What scoring reads. Every write of match data goes through the command service; scoring
-- writes only providers and their raw messages.

-- name: match
-- A unit with its match state, its sport and, when this client id was saved before, its seq.
SELECT u.id::text AS id, u.code, u.name, u.status, u.match_state, u.match_seq,
       d.code AS discipline, d.sport_file,
       (SELECT count(*) FROM unit_competitor s WHERE s.unit_id = u.id)::int AS side_count,
       (SELECT array_agg(ROW(s.sort_order, c.name, c.noc) ORDER BY s.sort_order)
          FROM unit_competitor s LEFT JOIN competitor c ON c.id = s.competitor_id
         WHERE s.unit_id = u.id) AS side_names,
       (SELECT a.seq FROM match_action a WHERE a.command_id = $2 AND a.unit_id = u.id)
         AS saved_seq
  FROM unit u
  JOIN discipline d ON d.id = u.discipline_id
 WHERE u.id = $1::uuid;

-- name: actions_after
-- A match's actions after a seq, in order. After 0, every one: undo replays the ones still
-- standing; after the seq of the console's copy, what changed since.
SELECT seq, kind, side, fields, undoes, undone_by, client_at
  FROM match_action
 WHERE unit_id = $1::uuid AND seq > $2
 ORDER BY seq;

-- name: recent
SELECT seq, kind, side, fields, undoes, undone_by, actor_name, screen, saved_at
  FROM match_action
 WHERE unit_id = $1::uuid
 ORDER BY seq DESC
 LIMIT $2;

-- name: seq_of_client
SELECT seq FROM match_action WHERE command_id = $1 AND unit_id = $2::uuid;

-- name: lock_saved_action
-- In a transaction (_confirm.py): the row lock writes WAL under a transaction id, so the
-- COMMIT waits for the synchronous standby. KEY SHARE blocks no reader and no undo.
SELECT seq FROM match_action WHERE command_id = $1 FOR KEY SHARE;

-- name: list_matches
-- The matches to pick from. With :assigned_only, those the account may score (as
-- unit_scorers() has it, written out here so the planner sees it once for every unit): every
-- match for an operator or admin, none without an account.
SELECT u.id::text AS id, u.code, u.name, u.status, u.start_at, u.match_state,
       d.code AS discipline, d.sport_file
  FROM unit u
  JOIN discipline d ON d.id = u.discipline_id
  JOIN event e ON e.id = u.event_id
 WHERE (:event_code = '' OR e.code = :event_code)
   AND (NOT :assigned_only
        OR EXISTS (SELECT 1 FROM account a
                    WHERE a.id = :account_id::uuid AND a.role IN ('operator', 'admin'))
        OR EXISTS (SELECT 1 FROM scorer_assignment s
                    WHERE s.unit_id = u.id AND s.account_id = :account_id::uuid)
        OR (NOT EXISTS (SELECT 1 FROM scorer_assignment s WHERE s.unit_id = u.id)
            AND EXISTS (SELECT 1 FROM scorer_assignment s
                         WHERE s.account_id = :account_id::uuid AND s.unit_id IS NULL
                           AND s.event_id = u.event_id AND s.venue = u.venue
                           AND s.day = (u.start_at AT TIME ZONE e.time_zone)::date)))
 ORDER BY u.start_at NULLS LAST, u.code
 LIMIT :limit;

-- name: may_score
-- Whether an account may score a unit: its role, and the unit's scorers by name
-- for the words of a refusal. No row: no such unit.
SELECT a.role, a.disabled, u.name AS unit_name,
       EXISTS (SELECT 1 FROM unit_scorers(u.id) s WHERE s.account_id = a.id) AS assigned,
       (SELECT string_agg(b.name, ', ' ORDER BY b.name)
          FROM unit_scorers(u.id) s JOIN account b ON b.id = s.account_id) AS scorers
  FROM unit u
  LEFT JOIN account a ON a.id = $1::uuid
 WHERE u.id = $2::uuid;

-- name: record_refusal
-- An action refused because the match is not the scorer's, once per client id. The account
-- only when it is one (a removed account's refusal is kept by its name).
INSERT INTO scorer_refusal (client_id, unit_id, account_id, actor_name, screen, kind, reason)
SELECT :client_id, (SELECT u.id FROM unit u WHERE u.id = :unit_id::uuid),
       (SELECT a.id FROM account a WHERE a.id = :account_id::uuid),
       :actor_name, :screen, :kind, :reason
ON CONFLICT (client_id) DO NOTHING;

-- name: unit_by_code
SELECT u.id::text AS id, d.code AS discipline, d.sport_file
  FROM unit u JOIN event e ON e.id = u.event_id JOIN discipline d ON d.id = u.discipline_id
 WHERE e.code = $1 AND u.code = $2;

-- name: save_provider
INSERT INTO provider (code, name, format, mode, address, login, secret, api_key_hash,
                      interval_seconds, event_code, enabled, updated_at)
VALUES (:code, :name, :format, :mode, :address, :login, :secret, :api_key_hash,
        :interval_seconds, :event_code, :enabled, now())
ON CONFLICT (code) DO UPDATE SET
  name = EXCLUDED.name, format = EXCLUDED.format, mode = EXCLUDED.mode,
  address = EXCLUDED.address, login = EXCLUDED.login, secret = EXCLUDED.secret,
  api_key_hash = EXCLUDED.api_key_hash, interval_seconds = EXCLUDED.interval_seconds,
  event_code = EXCLUDED.event_code, enabled = EXCLUDED.enabled, updated_at = now();

-- name: provider
SELECT code, name, format, mode, address, login, secret, api_key_hash, interval_seconds,
       event_code, enabled, last_pulled_at
  FROM provider WHERE code = $1;

-- name: count_kept_bytes
-- Adds a message's bytes to its provider's count for today (UTC), only while the count stays
-- within the day's bound; no row back: the bound is reached and nothing may be kept. The row
-- lock orders messages of one provider across every copy of scoring.
UPDATE provider
   SET kept_day = (now() AT TIME ZONE 'UTC')::date,
       kept_day_bytes = CASE WHEN kept_day = (now() AT TIME ZONE 'UTC')::date
                             THEN kept_day_bytes + :bytes ELSE :bytes END
 WHERE code = :code
   AND CASE WHEN kept_day = (now() AT TIME ZONE 'UTC')::date
            THEN kept_day_bytes + :bytes ELSE :bytes END <= :day_max_bytes
RETURNING kept_day_bytes;

-- name: seconds_to_midnight
-- When the day's bound starts again: seconds to the next midnight UTC.
SELECT ceil(extract(epoch FROM
         date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day'
         - (now() AT TIME ZONE 'UTC')))::int;

-- name: keep_message
-- The message as received, before anything is read from it.
INSERT INTO provider_message (provider_code, content_type, body, sha256)
VALUES (:provider_code, :content_type, :body, sha256(:body))
RETURNING id;

-- name: message_outcome
UPDATE provider_message
   SET outcome = :outcome, reason = :reason, unit_id = :unit_id::uuid, actions = :actions
 WHERE id = :id;

-- name: pulled
UPDATE provider SET last_pulled_at = now() WHERE code = $1;

-- name: held_matches
-- Of these units, the ones whose results the checker holds ($2: the disciplines held by
-- setting), each with its newest approval (null: never approved).
SELECT u.id::text AS id, approved_unit(u.id) AS approved
  FROM unit u
 WHERE u.id = ANY($1::uuid[]) AND unit_results_held(u.id, $2::text[]);
