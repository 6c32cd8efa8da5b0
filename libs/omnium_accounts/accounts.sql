-- name: insert_account
INSERT INTO account (login, name, role, password_hash)
VALUES ($1, $2, $3, $4)
RETURNING id, login, name, role;

-- name: set_password
UPDATE account SET password_hash = $2, failed_sign_ins = 0, locked_until = NULL
WHERE login = $1
RETURNING id;

-- name: account_for_sign_in
SELECT id, login, name, role, password_hash, disabled, failed_sign_ins,
       greatest(extract(epoch FROM locked_until - now()), 0)::float8 AS locked_for
FROM account WHERE login = $1;

-- name: sign_in_failed
-- Past the free failures each one doubles the wait before the next try, up to a cap.
UPDATE account
SET failed_sign_ins = failed_sign_ins + 1,
    locked_until = CASE WHEN failed_sign_ins + 1 > $2
      THEN now() + make_interval(secs => least($3 * power(2, failed_sign_ins - $2), $4))
      ELSE locked_until END
WHERE id = $1
RETURNING greatest(extract(epoch FROM locked_until - now()), 0)::float8 AS locked_for;

-- name: sign_in_passed
UPDATE account SET failed_sign_ins = 0, locked_until = NULL WHERE id = $1;

-- name: insert_session
INSERT INTO account_session (token_hash, account_id, csrf_token, screen, expires_at)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
RETURNING expires_at;

-- name: session_by_token
-- Reading a session also slides its end: an operator at work is not signed out mid-shift.
UPDATE account_session s
SET last_seen_at = now(),
    expires_at = greatest(s.expires_at, now() + make_interval(secs => $2))
FROM account a
WHERE s.token_hash = $1 AND a.id = s.account_id AND s.expires_at > now() AND NOT a.disabled
RETURNING a.id, a.login, a.name, a.role, s.csrf_token, s.screen, s.expires_at;

-- name: delete_session
DELETE FROM account_session WHERE token_hash = $1;

-- name: delete_expired_sessions
DELETE FROM account_session WHERE expires_at < now();

-- name: list_accounts
SELECT id, login, name, role, disabled FROM account ORDER BY login;
