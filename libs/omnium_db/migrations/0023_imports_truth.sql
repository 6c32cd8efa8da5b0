-- Imports tell the truth (issue 31).

-- The run that last counted a key missing: the missing-keys step is tried again after a lost
-- answer, and a repeat must not count the same run twice.
ALTER TABLE integration_key_state ADD COLUMN missed_in_run uuid;
-- A person answered the key's missing question (dismissed, or confirmed the cancel): it is not
-- counted or asked about again until a run lists it again.
ALTER TABLE integration_key_state ADD COLUMN missing_answered boolean NOT NULL DEFAULT false;

-- A rotated doorbell secret: the previous one is accepted until then, and no longer.
ALTER TABLE integration ADD COLUMN previous_secret_until timestamptz;

-- 0005 named these keys wrong (guard_min_share, ...): the names the imports service reads.
COMMENT ON COLUMN integration.settings IS
  'Overrides of the service defaults, set from the integration file: min_share, usual_runs, '
  'max_not_placed, max_refused, max_cleared, max_reopened, missing_runs_to_review, '
  'auto_cancel_missing. Other keys are refused when the file is read.';

-- When the settle window's timer last asked Scout to read the key again (cleared once a page
-- run lists it): the keys asked and not read yet bound the page runs asked of Scout at once.
ALTER TABLE integration_key_state ADD COLUMN read_asked_at timestamptz;
