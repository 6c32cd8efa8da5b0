-- name: insert_account
INSERT INTO account (login, name, role, password_hash)
VALUES (:login, :name, :role, :password_hash)
RETURNING id, login, name, role;

-- name: set_password
UPDATE account SET password_hash = $2 WHERE login = $1
RETURNING id;

-- name: account_for_sign_in
SELECT id, login, name, role, password_hash, disabled FROM account WHERE login = $1;

-- name: rehash_password
-- A good sign-in on a hash of an older kind: the same password, hashed the current way. Only
-- while the stored hash is still the one checked, so a password set meanwhile stays.
UPDATE account SET password_hash = :password_hash WHERE id = :id AND password_hash = :checked_hash;

-- name: insert_session
INSERT INTO account_session (token_hash, account_id, csrf_token, screen, expires_at)
VALUES (:token_hash, :account_id, :csrf_token, :screen, now() + make_interval(secs => :seconds))
RETURNING expires_at;

-- name: session_by_token
-- Reading a session also slides its end: an operator at work is not signed out mid-shift.
-- Only on the console it was made on (:screen; NULL: any).
UPDATE account_session s
SET last_seen_at = now(),
    expires_at = greatest(s.expires_at, now() + make_interval(secs => :seconds))
FROM account a
WHERE s.token_hash = :token_hash AND a.id = s.account_id AND s.expires_at > now() AND NOT a.disabled
  AND (:screen::text IS NULL OR s.screen = :screen::text)
RETURNING a.id, a.login, a.name, a.role, s.csrf_token, s.screen, s.expires_at;

-- name: delete_session
DELETE FROM account_session WHERE token_hash = $1;

-- name: delete_expired_sessions
DELETE FROM account_session WHERE expires_at < now();

-- name: accounts_overview
-- Every account for the admins' screen: its open sessions, when one was last used, and its
-- last change.
SELECT a.id, a.login, a.name, a.role, a.disabled, a.created_at,
       (count(s.token_hash) FILTER (WHERE s.expires_at > now()))::int AS sessions,
       max(s.last_seen_at) AS last_seen_at,
       c.change AS last_change, c.by_name AS last_change_by, c.at AS last_change_at
FROM account a
LEFT JOIN account_session s ON s.account_id = a.id
LEFT JOIN LATERAL (
  SELECT x.change, x.by_name, x.at FROM account_change x
   WHERE x.login = a.login ORDER BY x.id DESC LIMIT 1
) c ON true
GROUP BY a.id, c.change, c.by_name, c.at
ORDER BY a.login;

-- name: record_change
INSERT INTO account_change (login, change, by_name, by_source) VALUES (:login, :change, :by_name, :by_source);

-- name: lock_admins
-- Taken before a change that could leave no admin: two admins turning each other off at the
-- same moment go one after the other, and the second is refused.
SELECT id FROM account WHERE role = 'admin' ORDER BY id FOR UPDATE;

-- name: account_by_login
SELECT id, login, name, role, disabled FROM account WHERE login = $1;

-- name: set_role
UPDATE account SET role = $2 WHERE login = $1 RETURNING id;

-- name: set_disabled
UPDATE account SET disabled = $2 WHERE login = $1 RETURNING id;

-- name: other_admins
-- Admins who could still sign in besides this login: the last one is never locked out.
SELECT count(*)::int FROM account WHERE role = 'admin' AND NOT disabled AND login <> $1;

-- name: delete_sessions_of
-- Every session of the login but the one kept ($2, a token hash or NULL).
DELETE FROM account_session s
USING account a
WHERE a.login = $1 AND s.account_id = a.id AND s.token_hash IS DISTINCT FROM $2
RETURNING s.token_hash;

-- name: insert_api_key
INSERT INTO api_key (name, key_hash, rate_per_second, burst, made_by)
VALUES (:name, :key_hash, :rate_per_second, :burst, :made_by)
RETURNING id, name, rate_per_second, burst, disabled, made_by, created_at;

-- name: list_api_keys
SELECT id, name, rate_per_second, burst, disabled, made_by, created_at FROM api_key ORDER BY name;

-- name: set_api_key_disabled
UPDATE api_key SET disabled = $2, changed_at = now() WHERE name = $1 RETURNING id;

-- name: live_api_keys
SELECT name, key_hash, rate_per_second, burst FROM api_key WHERE NOT disabled;

-- name: throttle_take
-- One place in each count ($1 keys, sorted, with $2 their windows in seconds); a count whose
-- window is over starts again at 1. The caller rolls back when one is over its limit.
INSERT INTO sign_in_throttle AS t (key, failures, window_ends)
SELECT u.key, 1, now() + make_interval(secs => u.window_seconds)
FROM unnest($1::text[], $2::float8[]) AS u(key, window_seconds)
ORDER BY u.key
ON CONFLICT (key) DO UPDATE
SET failures = CASE WHEN t.window_ends <= now() THEN 1 ELSE t.failures + 1 END,
    window_ends = CASE WHEN t.window_ends <= now() THEN excluded.window_ends
                       ELSE t.window_ends END
RETURNING t.key, t.failures,
          greatest(extract(epoch FROM t.window_ends - now()), 0)::float8 AS wait;

-- name: throttle_give_back
UPDATE sign_in_throttle SET failures = failures - 1
WHERE key = ANY($1::text[]) AND failures > 0 AND window_ends > now();

-- name: throttle_forget
DELETE FROM sign_in_throttle WHERE window_ends < now();
