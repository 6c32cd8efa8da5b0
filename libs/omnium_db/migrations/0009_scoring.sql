-- Live scoring: each match's state on its unit, the scorers' and providers' actions in order,
-- and providers registered by settings with their raw messages kept as received.

-- The match state the sport file's rules made, and how many actions made it. A scoring
-- command names the match_seq it was checked against; the road refuses a stale one.
ALTER TABLE unit
  ADD COLUMN match_state jsonb,
  ADD COLUMN match_seq   integer NOT NULL DEFAULT 0 CHECK (match_seq >= 0);

-- One row per accepted action, written by the road in the command's transaction. An undo is
-- an action too: it names the action it takes back, which gets undone_by.
CREATE TABLE match_action (
  unit_id     uuid NOT NULL REFERENCES unit (id) ON DELETE CASCADE,
  seq         integer NOT NULL CHECK (seq >= 1),
  command_id  text NOT NULL UNIQUE,           -- the device's client id for the action
  kind        text NOT NULL,
  side        integer,
  fields      jsonb NOT NULL DEFAULT '{}',
  undoes      integer,
  undone_by   integer,
  actor_kind  text NOT NULL,
  actor_name  text NOT NULL,
  source_code text,                           -- the account or provider behind the name
  screen      text,                           -- the screen or app it came from (target 8)
  client_at   timestamptz,                    -- when it was tapped, by the device's clock
  saved_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (unit_id, seq)
);

-- A live data provider, registered by settings (providers/*.toml, loaded into this table).
CREATE TABLE provider (
  code             text PRIMARY KEY CHECK (code ~ '^[a-z0-9][a-z0-9_-]{1,39}$'),
  name             text NOT NULL,
  format           text NOT NULL CHECK (format IN ('odf')),
  mode             text NOT NULL CHECK (mode IN ('push', 'pull')),
  address          text,                      -- where a pull provider is read from
  login            text,
  secret           text,                      -- pull: the provider's password or token
  api_key_hash     bytea,                     -- push: sha256 of the key it sends
  interval_seconds double precision NOT NULL DEFAULT 5 CHECK (interval_seconds > 0),
  event_code       text NOT NULL,
  enabled          boolean NOT NULL DEFAULT true,
  last_pulled_at   timestamptz,
  updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Every message a provider sent, byte for byte, with what became of it.
CREATE TABLE provider_message (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  provider_code text NOT NULL REFERENCES provider (code) ON DELETE CASCADE,
  received_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  content_type  text,
  body          bytea NOT NULL,
  sha256        bytea NOT NULL,
  outcome       text NOT NULL DEFAULT 'received'
                CHECK (outcome IN ('received', 'accepted', 'duplicate', 'refused')),
  reason        text,
  unit_id       uuid REFERENCES unit (id) ON DELETE SET NULL,
  actions       integer NOT NULL DEFAULT 0
);
CREATE INDEX provider_message_by_provider ON provider_message (provider_code, id DESC);
