-- Delivery: media clients, their feeds, every send, the outbox cursor and delivery alerts.

-- A media client. How it is reached (transport) and its own settings (SFTP host, pinned host
-- key, folder; webhook URL and secret; the checker step) are data: adding one is no code.
CREATE TABLE client (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  code        text NOT NULL UNIQUE CHECK (code ~ '^[a-z0-9][a-z0-9_-]{1,39}$'),
  name        text NOT NULL,
  event_id    uuid NOT NULL REFERENCES event (id) ON DELETE CASCADE,
  transport   text NOT NULL CHECK (transport IN ('sftp', 'webhook')),
  settings    jsonb NOT NULL DEFAULT '{}',
  enabled     boolean NOT NULL DEFAULT true,
  -- One delivery copy works a client at a time (claimed with SKIP LOCKED, held by a lease),
  -- so its files go out in order over one connection and never twice from two copies.
  leased_by   text,
  lease_until timestamptz,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One file (or webhook body) a client receives, kept current as the data changes.
CREATE TABLE client_feed (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  client_id     uuid NOT NULL REFERENCES client (id) ON DELETE CASCADE,
  kind          text NOT NULL CHECK (kind IN ('schedule', 'results', 'medals')),
  format        text NOT NULL CHECK (format IN ('json', 'csv', 'odf')),
  discipline_id uuid REFERENCES discipline (id) ON DELETE CASCADE,  -- null: the whole Games
  top_n         int CHECK (top_n >= 1),                               -- medals only
  live          boolean NOT NULL DEFAULT false,  -- merged at the live window, not the feed one
  -- Every change that touches the feed adds a mark; a build covers the marks it saw. The feed is
  -- owed a rebuild while marks > built_marks: a change that commits late, with an outbox id lower
  -- than one already built, still adds its mark.
  marks         bigint NOT NULL DEFAULT 1,
  built_marks   bigint NOT NULL DEFAULT 0,
  -- The newest outbox id that touched the feed, and the newest its last good send carried.
  wanted_id     bigint NOT NULL DEFAULT 0,
  built_id      bigint NOT NULL DEFAULT 0,
  due_at        timestamptz DEFAULT now(),       -- when the debounce window closes
  force         boolean NOT NULL DEFAULT false,  -- resend even if the bytes did not change
  version       int NOT NULL DEFAULT 0,          -- only goes up; one per new content
  content_sha   text,                            -- of the content, without version and stamps
  delivered_version int,
  delivered_content_sha text,
  delivered_sha256 text,
  delivered_at  timestamptz,
  UNIQUE NULLS NOT DISTINCT (client_id, kind, format, discipline_id, top_n)
);
CREATE INDEX client_feed_owed ON client_feed (client_id) WHERE marks > built_marks;

-- Every send: what, which version, its hash and size, tries, outcome, saved and delivered times.
CREATE TABLE delivery_attempt (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  client_id    uuid NOT NULL REFERENCES client (id) ON DELETE CASCADE,
  feed_id      bigint NOT NULL REFERENCES client_feed (id) ON DELETE CASCADE,
  version      int NOT NULL,
  file_name    text NOT NULL,
  sha256       text NOT NULL,
  bytes        int NOT NULL,
  attempts     int NOT NULL,
  outcome      text NOT NULL CHECK (outcome IN ('delivered', 'failed', 'refused')),
  error        text,
  outbox_id    bigint,               -- the newest outbox row (domain_event) the file carries
  saved_at     timestamptz,          -- commit time of that change
  delivered_at timestamptz,
  finished_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  resend       boolean NOT NULL DEFAULT false
);
CREATE INDEX delivery_attempt_by_feed ON delivery_attempt (feed_id, id DESC);
CREATE INDEX delivery_attempt_by_client ON delivery_attempt (client_id, id DESC);

-- Where delivery has read the outbox to. One row, claimed with SKIP LOCKED by one copy at a
-- time; recent_ids are the ids read inside the lag window, so an outbox row that commits late
-- with a lower id is still read once, and only once.
CREATE TABLE delivery_cursor (
  name       text PRIMARY KEY,
  last_id    bigint NOT NULL DEFAULT 0,
  recent_ids bigint[] NOT NULL DEFAULT '{}',
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO delivery_cursor (name) VALUES ('outbox');

CREATE INDEX domain_event_by_saved_at ON domain_event (saved_at);
-- The checker step: each unit's newest approval carries the results a person approved.
CREATE INDEX domain_event_approvals ON domain_event (event_id, unit_id, id DESC)
  WHERE kind = 'results.approved';

-- A client that cannot be reached after every try: one open alert per client and cause.
CREATE TABLE delivery_alert (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  client_id  uuid NOT NULL REFERENCES client (id) ON DELETE CASCADE,
  kind       text NOT NULL CHECK (kind IN ('send_failed', 'host_key')),
  message    text NOT NULL,
  status     text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'cleared')),
  raised_at  timestamptz NOT NULL DEFAULT now(),
  cleared_at timestamptz,
  sent_at    timestamptz
);
CREATE UNIQUE INDEX delivery_alert_one_open ON delivery_alert (client_id, kind)
  WHERE status = 'open';
