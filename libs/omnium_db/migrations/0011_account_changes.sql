-- Who changed an account and how (made, new password, role, off, on, signed out everywhere),
-- from the console or the command line. The login is kept as text: the record outlives the
-- account's row.
CREATE TABLE account_change (
  id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  login     text NOT NULL,
  change    text NOT NULL,
  by_name   text NOT NULL,
  by_source text,
  at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX account_change_by_login ON account_change (login, id DESC);
