-- The provider door's bound on raw bytes kept per provider per day (UTC), counted in the same
-- transaction that keeps a message, so every copy of scoring shares one count and a refused
-- message is never half-counted.
ALTER TABLE provider
  ADD COLUMN kept_day       date,
  ADD COLUMN kept_day_bytes bigint NOT NULL DEFAULT 0 CHECK (kept_day_bytes >= 0);

-- A pull provider's password now comes from a mounted file (password_file) and is read when
-- the provider is read; it is no longer copied into the database. The column stays for
-- copies of the release before, which still name it; nothing reads it.
UPDATE provider SET secret = NULL;
