-- Sign-in throttles where a process has no Redis (the admin console) or Redis is down: failed
-- sign-ins per client address, per address and login, and per login, in fixed windows. Keys
-- carry digests, never a login or an address as typed. The per-account lock-out of 0007
-- (failed_sign_ins, locked_until) is no longer used: a stranger could hold any login with it.

CREATE TABLE sign_in_throttle (
  key         text PRIMARY KEY,
  failures    integer NOT NULL,
  window_ends timestamptz NOT NULL
);
CREATE INDEX sign_in_throttle_window_ends ON sign_in_throttle (window_ends);
