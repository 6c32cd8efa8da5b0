-- Waiting for you (review items), alerts, per-integration settings, and operator jobs.

-- Per-integration overrides of the OMNIUM_* defaults: guard_min_share, guard_max_cleared, ...
ALTER TABLE integration ADD COLUMN settings jsonb NOT NULL DEFAULT '{}';

-- An operator may run a Scout run again (Start after a guard pause): only doorbells and
-- scheduler checks are deduplicated per Scout run.
DROP INDEX integration_job_one_pull_per_run;
CREATE UNIQUE INDEX integration_job_one_pull_per_run
  ON integration_job (integration_id, scout_run_id) WHERE kind = 'pull' AND via = 'doorbell';
-- An operator's Start runs the paused run past its guards.
ALTER TABLE integration_job ADD COLUMN past_guards boolean NOT NULL DEFAULT false;

-- One place for what needs a person: held rows, guard pauses, keys missing from full runs.
CREATE TABLE review_item (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  integration_id uuid NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  kind           text NOT NULL CHECK (kind IN ('held', 'guard', 'missing')),
  subject_key    text NOT NULL,
  subject_id     uuid,
  run_id         uuid REFERENCES integration_run (id) ON DELETE SET NULL,
  question       text NOT NULL,
  status         text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'done', 'dismissed')),
  created_at     timestamptz NOT NULL DEFAULT now(),
  resolved_at    timestamptz,
  resolved_by    text
);
CREATE UNIQUE INDEX review_item_one_open
  ON review_item (integration_id, kind, subject_key) WHERE status = 'open';

-- One row per open cause, not one per minute; cleared when the cause is gone.
CREATE TABLE alert (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  integration_id uuid NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  kind           text NOT NULL CHECK (kind IN ('run_failed', 'scout_failed', 'batch_failed',
                   'guard', 'quiet')),
  message        text NOT NULL,
  run_id         uuid REFERENCES integration_run (id) ON DELETE SET NULL,
  status         text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'cleared')),
  raised_at      timestamptz NOT NULL DEFAULT now(),
  cleared_at     timestamptz,
  sent_at        timestamptz
);
CREATE UNIQUE INDEX alert_one_open ON alert (integration_id, kind) WHERE status = 'open';
