-- Imports tell the truth (issue 31).

-- The run that last counted a key missing: the missing-keys step is tried again after a lost
-- answer, and a repeat must not count the same run twice.
ALTER TABLE integration_key_state ADD COLUMN missed_in_run uuid;
-- A person answered the key's missing question (dismissed, or confirmed the cancel): it is not
-- counted or asked about again until a run lists it again.
ALTER TABLE integration_key_state ADD COLUMN missing_answered boolean NOT NULL DEFAULT false;
