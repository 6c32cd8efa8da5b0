-- The people behind gRPC calls: a console sends the person's session token, and the service
-- reads who it is. Only read, never slid: the console's own read of the cookie slides it.

-- name: session_for_call
SELECT a.id::text AS id, a.login, a.name, a.role
  FROM account_session s
  JOIN account a ON a.id = s.account_id
 WHERE s.token_hash = $1 AND s.expires_at > now() AND NOT a.disabled;
