-- Integrations (Scout jobs), their runs, the row log and key state (Section 3 seed, K1).

CREATE TABLE integration (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  code          text NOT NULL UNIQUE CHECK (code ~ '^[a-z0-9][a-z0-9-]{1,62}$'),
  event_id      uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  name          text NOT NULL,
  state         text NOT NULL DEFAULT 'on' CHECK (state IN ('on', 'paused', 'off')),
  created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE integration_run (
  id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  integration_id uuid NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  scout_run_id   text NOT NULL,
  status         text NOT NULL CHECK (status IN ('received', 'applying', 'done', 'partly_done',
                   'failed', 'scout_failed', 'older', 'paused_by_guard')),
  scout_status   text CHECK (scout_status IN ('passed', 'failed')),
  build          text CHECK (build IN ('all', 'day', 'page')),
  row_count      int,
  batch_total    int,
  batch_done     int NOT NULL DEFAULT 0,
  reason         text,
  received_at    timestamptz NOT NULL DEFAULT now(),
  finished_at    timestamptz,
  UNIQUE (integration_id, scout_run_id)
);
CREATE INDEX integration_run_newest ON integration_run (integration_id, received_at DESC);

-- The row log: only rows that changed something, were kept by hand, held, refused, not
-- placed or had a problem. Unchanged rows are not logged.
CREATE TABLE integration_row (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id         uuid NOT NULL REFERENCES integration_run (id) ON DELETE CASCADE,
  integration_id uuid NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  batch_no       int,
  position       int NOT NULL,
  subject_key    text NOT NULL,
  subject_kind   text NOT NULL,
  subject_id     uuid,
  row_hash       bytea,
  outcome        text NOT NULL CHECK (outcome IN ('accepted', 'unchanged', 'kept_by_hand',
                   'refused', 'not_placed', 'held', 'skipped', 'older', 'problem')),
  reason         text,
  diff           jsonb NOT NULL DEFAULT '[]',
  kept_by_hand   jsonb NOT NULL DEFAULT '[]',
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX integration_row_by_run ON integration_row (run_id, position);
CREATE INDEX integration_row_by_key ON integration_row (integration_id, subject_key, id DESC);

CREATE TABLE integration_key_state (
  integration_id  uuid    NOT NULL REFERENCES integration (id) ON DELETE CASCADE,
  subject_key     text    NOT NULL,
  subject_kind    text    NOT NULL,
  subject_id      uuid,
  last_hash       bytea,
  applied_seq     bigint,
  last_seen_run   uuid,
  missing_runs    int     NOT NULL DEFAULT 0,
  official_at     timestamptz,
  next_read_at    timestamptz,
  PRIMARY KEY (integration_id, subject_key)
);
CREATE INDEX ix_key_state_next_read ON integration_key_state (next_read_at)
  WHERE next_read_at IS NOT NULL;
