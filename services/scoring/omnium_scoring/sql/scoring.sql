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

-- name: list_matches
SELECT u.id::text AS id, u.code, u.name, u.status, u.start_at, u.match_state,
       d.code AS discipline, d.sport_file
  FROM unit u
  JOIN discipline d ON d.id = u.discipline_id
  JOIN event e ON e.id = u.event_id
 WHERE ($1 = '' OR e.code = $1)
 ORDER BY u.start_at NULLS LAST, u.code
 LIMIT $2;

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

-- name: pull_providers
SELECT code FROM provider WHERE mode = 'pull' AND enabled ORDER BY code;

-- name: keep_message
-- The message as received, before anything is read from it.
INSERT INTO provider_message (provider_code, content_type, body, sha256)
VALUES ($1, $2, $3, sha256($3))
RETURNING id;

-- name: message_outcome
UPDATE provider_message SET outcome = $2, reason = $3, unit_id = $4::uuid, actions = $5
 WHERE id = $1;

-- name: pulled
UPDATE provider SET last_pulled_at = now() WHERE code = $1;
