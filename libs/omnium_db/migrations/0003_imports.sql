-- The imports service: integrations' Scout settings, mapping versions, the job queue, lookups.

ALTER TABLE integration
  ADD COLUMN target          text NOT NULL DEFAULT 'unit' CHECK (target IN ('unit', 'medal_row')),
  ADD COLUMN scout_base_url  text NOT NULL DEFAULT '',
  ADD COLUMN scout_job       text NOT NULL DEFAULT '',
  -- Doorbells are signed with `secret`; while a secret is being rotated the previous one is
  -- accepted too, until it is cleared.
  ADD COLUMN secret          text NOT NULL DEFAULT '',
  ADD COLUMN previous_secret text,
  ADD COLUMN check_seconds   int NOT NULL DEFAULT 600 CHECK (check_seconds > 0),
  -- A schedule integration creates the units its rows name that we do not have yet.
  ADD COLUMN creates_units   boolean NOT NULL DEFAULT false,
  ADD COLUMN current_version int,
  ADD COLUMN last_heard_at   timestamptz;

-- The no-code mapping steps, versioned: a run records the version it was mapped with.
CREATE TABLE integration_version (
  integration_id uuid NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  version        int NOT NULL CHECK (version >= 1),
  spec           jsonb NOT NULL,
  note           text,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (integration_id, version)
);

-- The queue. Claimed with FOR UPDATE SKIP LOCKED; a running job holds a lease it renews, and a
-- job whose lease ran out is taken again and continues its run from the first unsaved batch.
CREATE TABLE integration_job (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  integration_id uuid NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  kind           text NOT NULL CHECK (kind IN ('pull', 'check')),
  scout_run_id   text,
  via            text NOT NULL CHECK (via IN ('doorbell', 'scheduler', 'operator', 'test')),
  status         text NOT NULL DEFAULT 'queued'
                   CHECK (status IN ('queued', 'running', 'done', 'failed')),
  attempts       int NOT NULL DEFAULT 0,
  lease_until    timestamptz,
  worker         text,
  run_id         uuid REFERENCES integration_run (id) ON DELETE SET NULL,
  error          text,
  created_at     timestamptz NOT NULL DEFAULT now(),
  started_at     timestamptz,
  finished_at    timestamptz
);
-- A doorbell rung twice for the same Scout run never queues a second pull.
CREATE UNIQUE INDEX integration_job_one_pull_per_run
  ON integration_job (integration_id, scout_run_id) WHERE kind = 'pull';
CREATE INDEX integration_job_open ON integration_job (status, created_at)
  WHERE status IN ('queued', 'running');
-- One run per integration at a time, across every copy of the imports process.
CREATE UNIQUE INDEX integration_job_one_running
  ON integration_job (integration_id) WHERE status = 'running';
-- The scheduler queues at most one check per integration, however many copies run it.
CREATE UNIQUE INDEX integration_job_one_open_check
  ON integration_job (integration_id) WHERE kind = 'check' AND status IN ('queued', 'running');

-- Scout's ids for things, mapped to ours (the mapping's "look up" step).
CREATE TABLE integration_lookup (
  integration_id uuid NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  kind           text NOT NULL CHECK (kind IN ('competitor', 'unit')),
  external_id    text NOT NULL,
  our_id         uuid NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (integration_id, kind, external_id)
);

ALTER TABLE integration_run
  ADD COLUMN version            int,
  ADD COLUMN job_id             bigint,
  ADD COLUMN scout_finished_at  timestamptz,
  ADD COLUMN day                date,
  ADD COLUMN outcomes           jsonb NOT NULL DEFAULT '{}',
  ADD COLUMN started_at         timestamptz;
CREATE INDEX integration_run_applied ON integration_run (integration_id, scout_finished_at DESC)
  WHERE status IN ('done', 'partly_done');
