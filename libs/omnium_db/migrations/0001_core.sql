-- The Games, their units and sides, the one road's log and outbox, accounts.

CREATE EXTENSION IF NOT EXISTS pgcrypto;

-- One sequence for every write: a record's changed_seq says when it last changed, and import
-- key state compares it with the value it saw right after its own write (the fast path).
CREATE SEQUENCE change_seq;

CREATE TABLE event (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  code        text NOT NULL UNIQUE CHECK (code ~ '^[A-Z0-9_-]{2,32}$'),
  name        text NOT NULL,
  time_zone   text NOT NULL DEFAULT 'UTC',
  starts_on   date,
  ends_on     date,
  changed_seq bigint NOT NULL DEFAULT nextval('change_seq'),
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE discipline (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  event_id    uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  code        text NOT NULL CHECK (code ~ '^[A-Z]{3}$'),   -- ODF discipline code, e.g. ATH
  name        text NOT NULL,
  sport_file  text,                                         -- the scoring rules it uses
  changed_seq bigint NOT NULL DEFAULT nextval('change_seq'),
  UNIQUE (event_id, code)
);

-- A team or a person, with its organisation (NOC).
CREATE TABLE competitor (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  event_id      uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  discipline_id uuid REFERENCES discipline (id) ON DELETE CASCADE,
  kind          text NOT NULL CHECK (kind IN ('team', 'person')),
  code          text NOT NULL,
  name          text NOT NULL,
  noc           text NOT NULL CHECK (noc ~ '^[A-Z]{3}$'),
  pinned        text[] NOT NULL DEFAULT '{}',
  changed_seq   bigint NOT NULL DEFAULT nextval('change_seq'),
  UNIQUE (event_id, code)
);

-- A competition unit (a match, a heat, a final). Its code is the ODF Results System Code.
CREATE TABLE unit (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  event_id      uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  discipline_id uuid NOT NULL REFERENCES discipline (id) ON DELETE CASCADE,
  code          text NOT NULL CHECK (code ~ '^[A-Z0-9-]{34}$'),
  name          text NOT NULL,
  phase         text NOT NULL DEFAULT '',
  start_at      timestamptz,
  venue         text,
  status        text NOT NULL DEFAULT 'SCHEDULED' CHECK (status IN (
                  'SCHEDULED', 'DELAYED', 'GETTING_READY', 'RUNNING', 'INTERRUPTED',
                  'UNOFFICIAL', 'OFFICIAL', 'PROTESTED', 'POSTPONED', 'RESCHEDULED',
                  'CANCELLED')),
  pinned        text[] NOT NULL DEFAULT '{}',
  -- Bumped on every write to the unit or to any of its sides.
  changed_seq   bigint NOT NULL DEFAULT nextval('change_seq'),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  UNIQUE (event_id, code)
);
CREATE INDEX unit_by_changed_seq ON unit (changed_seq);
CREATE INDEX unit_by_start ON unit (event_id, start_at);

-- One side of a unit: a team or athlete in a match, a lane in a heat.
CREATE TABLE unit_competitor (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  unit_id       uuid NOT NULL REFERENCES unit (id) ON DELETE CASCADE,
  sort_order    int NOT NULL CHECK (sort_order >= 1),
  competitor_id uuid REFERENCES competitor (id),
  score         text,
  result        text,
  rank          int CHECK (rank >= 1),
  medal         text CHECK (medal IN ('GOLD', 'SILVER', 'BRONZE')),
  pinned        text[] NOT NULL DEFAULT '{}',
  changed_seq   bigint NOT NULL DEFAULT nextval('change_seq'),
  UNIQUE (unit_id, sort_order)
);

-- Who is entered in which event of a discipline.
CREATE TABLE entry (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  event_id      uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  discipline_id uuid NOT NULL REFERENCES discipline (id) ON DELETE CASCADE,
  event_name    text NOT NULL,                    -- e.g. "Men's 100m"
  competitor_id uuid NOT NULL REFERENCES competitor (id) ON DELETE CASCADE,
  status        text NOT NULL DEFAULT 'ENTERED',
  pinned        text[] NOT NULL DEFAULT '{}',
  changed_seq   bigint NOT NULL DEFAULT nextval('change_seq'),
  UNIQUE (discipline_id, event_name, competitor_id)
);

-- One line of a medal table: per discipline, or for the whole Games when discipline_id is null.
CREATE TABLE medal_row (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  event_id      uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  discipline_id uuid REFERENCES discipline (id) ON DELETE CASCADE,
  noc           text NOT NULL CHECK (noc ~ '^[A-Z]{3}$'),
  gold          int NOT NULL DEFAULT 0 CHECK (gold >= 0),
  silver        int NOT NULL DEFAULT 0 CHECK (silver >= 0),
  bronze        int NOT NULL DEFAULT 0 CHECK (bronze >= 0),
  total         int NOT NULL DEFAULT 0 CHECK (total >= 0),
  rank          int CHECK (rank >= 1),
  pinned        text[] NOT NULL DEFAULT '{}',
  changed_seq   bigint NOT NULL DEFAULT nextval('change_seq'),
  UNIQUE NULLS NOT DISTINCT (event_id, discipline_id, noc)
);
CREATE INDEX medal_row_by_changed_seq ON medal_row (changed_seq);

-- One row per command applied: the idempotency record. A repeat of command_id gets `answer`
-- back, marked duplicate, and writes nothing.
CREATE TABLE command (
  command_id   text PRIMARY KEY CHECK (length(command_id) BETWEEN 1 AND 200),
  code         text NOT NULL,
  source_code  text,
  request_hash bytea,
  outcome      text NOT NULL,
  answer       bytea NOT NULL,
  seq          bigint,
  created_at   timestamptz NOT NULL DEFAULT now()
);

-- The log: one item per command, with who sent it, from which screen, and what it changed.
CREATE TABLE timeline_item (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  command_id   text NOT NULL,
  code         text NOT NULL,
  event_id     uuid REFERENCES event (id) ON DELETE CASCADE,
  subject_kind text NOT NULL,
  subject_id   uuid,
  unit_ids     uuid[] NOT NULL DEFAULT '{}',
  actor_kind   text NOT NULL CHECK (actor_kind IN
                 ('person', 'integration', 'scorer', 'provider', 'system')),
  actor_name   text NOT NULL,
  source_code  text,
  screen       text,
  payload      jsonb NOT NULL DEFAULT '{}',
  diff         jsonb NOT NULL DEFAULT '[]',
  seq          bigint,
  occurred_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX timeline_by_subject ON timeline_item (subject_kind, subject_id, id DESC);
CREATE INDEX timeline_by_unit ON timeline_item USING gin (unit_ids);
CREATE INDEX timeline_by_event ON timeline_item (event_id, id DESC);

-- The outbox: one row per changed record, written in the command's transaction and read by
-- delivery. saved_at is taken at write time, inside the transaction, just before its commit.
CREATE TABLE domain_event (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id     uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  kind         text NOT NULL,
  subject_kind text NOT NULL,
  subject_id   uuid NOT NULL,
  unit_id      uuid,
  seq          bigint NOT NULL,
  command_id   text NOT NULL,
  payload      jsonb NOT NULL,
  saved_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX domain_event_by_unit ON domain_event (unit_id, id) WHERE unit_id IS NOT NULL;

-- One NOTIFY per writing statement (not per row): listeners then read the outbox past their
-- own watermark, so a lost or merged notification loses nothing.
CREATE FUNCTION domain_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('omnium_domain_event', (SELECT max(id)::text FROM new_rows));
  RETURN NULL;
END $$;
CREATE TRIGGER domain_event_notify AFTER INSERT ON domain_event
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION domain_event_notify();

CREATE TABLE account (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  login         text NOT NULL UNIQUE CHECK (login ~ '^[a-z0-9._@-]{2,64}$'),
  name          text NOT NULL,
  role          text NOT NULL CHECK (role IN ('admin', 'operator', 'scorer', 'viewer')),
  password_hash text NOT NULL,
  disabled      boolean NOT NULL DEFAULT false,
  created_at    timestamptz NOT NULL DEFAULT now()
);
