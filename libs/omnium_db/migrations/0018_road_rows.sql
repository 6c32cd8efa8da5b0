-- The rows the command service's read gives back (services/command/omnium_command/sql/road.sql),
-- one type per kind of record. PostgreSQL sends them in binary and asyncpg hands them over as
-- records read by field name: no JSON built per row on the server, and none parsed in Python.
-- Ids are text, as the road holds them. A field added here is read by name, so the order of
-- the fields matters only to the ROW(...) that fills them, in the same file.
CREATE TYPE road_unit AS (
  id          text,
  code        text,
  event_id    text,
  name        text,
  phase       text,
  start_at    timestamptz,
  venue       text,
  status      text,
  pinned      text[],
  changed_seq bigint,
  match_seq   int
);

CREATE TYPE road_side AS (
  unit_id       text,
  id            text,
  "order"       int,
  competitor_id text,
  score         text,
  result        text,
  rank          int,
  medal         text,
  pinned        text[]
);

CREATE TYPE road_competitor AS (
  id          text,
  code        text,
  event_id    text,
  name        text,
  noc         text,
  pinned      text[],
  changed_seq bigint
);

CREATE TYPE road_medal_row AS (
  id          text,
  ref         text,
  event_id    text,
  gold        int,
  silver      int,
  bronze      int,
  total       int,
  rank        int,
  pinned      text[],
  changed_seq bigint
);
