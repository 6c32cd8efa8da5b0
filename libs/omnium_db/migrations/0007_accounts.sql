-- Sign-in for the accounts of 0001: sessions (cookie tokens kept only as hashes) and the
-- count of failed sign-ins that slows a login down.

ALTER TABLE account
  ADD COLUMN failed_sign_ins integer NOT NULL DEFAULT 0,
  ADD COLUMN locked_until    timestamptz;

CREATE TABLE account_session (
  token_hash   bytea PRIMARY KEY,
  account_id   uuid NOT NULL REFERENCES account (id) ON DELETE CASCADE,
  csrf_token   text NOT NULL,
  screen       text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX account_session_account ON account_session (account_id);
CREATE INDEX account_session_expires ON account_session (expires_at);
