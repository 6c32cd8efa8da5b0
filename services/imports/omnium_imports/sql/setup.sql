-- Setting integrations up: reference data, the integration, its mapping version, lookups.

-- name: upsert_event
INSERT INTO event (code, name, time_zone, starts_on, ends_on)
VALUES (:code, :name, :time_zone, :starts_on::date, :ends_on::date)
ON CONFLICT (code) DO UPDATE SET name = EXCLUDED.name, time_zone = EXCLUDED.time_zone
RETURNING id::text;

-- name: upsert_disciplines
INSERT INTO discipline (event_id, code, name)
SELECT :event_id::uuid, v.code, v.name FROM unnest(:codes::text[], :names::text[]) AS v(code, name)
ON CONFLICT (event_id, code) DO UPDATE SET name = EXCLUDED.name;

-- name: upsert_competitors
-- Competitors keyed by our own code, which for reference loaded from Scout is Scout's id.
INSERT INTO competitor (event_id, discipline_id, kind, code, name, noc)
SELECT :event_id::uuid, d.id, v.kind, v.code, v.name, v.noc
  FROM unnest(:codes::text[], :names::text[], :nocs::text[], :kinds::text[], :disciplines::text[])
       AS v(code, name, noc, kind, discipline)
  LEFT JOIN discipline d ON d.event_id = :event_id::uuid AND d.code = v.discipline
ON CONFLICT (event_id, code) DO NOTHING;

-- name: competitor_ids
SELECT code, id::text FROM competitor
 WHERE event_id = $1::uuid AND code = ANY($2::text[]);

-- name: upsert_integration
-- A new secret keeps the one it replaces for :rotation_seconds, so Scout's doorbells signed
-- with it still ring while Scout switches. :settings comes as JSON text (any connection).
INSERT INTO integration AS i (code, event_id, name, state, target, scout_base_url, scout_job,
                              secret, check_seconds, creates_units, settings)
VALUES (:code, (SELECT id FROM event WHERE code = :event_code), :name, :state, :target,
        :base_url, :job, :secret, :check_seconds, :creates_units, :settings::text::jsonb)
ON CONFLICT (code) DO UPDATE SET
  name = EXCLUDED.name, target = EXCLUDED.target, scout_base_url = EXCLUDED.scout_base_url,
  scout_job = EXCLUDED.scout_job, secret = EXCLUDED.secret,
  previous_secret = CASE WHEN i.secret <> EXCLUDED.secret THEN i.secret
                         ELSE i.previous_secret END,
  previous_secret_until = CASE WHEN i.secret <> EXCLUDED.secret
                               THEN now() + make_interval(secs => :rotation_seconds)
                               ELSE i.previous_secret_until END,
  check_seconds = EXCLUDED.check_seconds, creates_units = EXCLUDED.creates_units,
  settings = EXCLUDED.settings
RETURNING id::text;

-- name: add_version
-- A new version of the mapping, made current; one the same as the current version adds none.
-- Old versions stay: runs name the one they used. The mapping comes as JSON text, so a plain
-- connection (no JSON codec) sends it as well as a pool's.
WITH same AS (
  SELECT v.version
    FROM integration i
    JOIN integration_version v ON v.integration_id = i.id AND v.version = i.current_version
   WHERE i.id = :integration_id::uuid AND v.spec = :mapping::text::jsonb
), next AS (
  SELECT coalesce(max(version), 0) + 1 AS version
    FROM integration_version WHERE integration_id = :integration_id::uuid
), added AS (
  INSERT INTO integration_version (integration_id, version, spec, note)
  SELECT :integration_id::uuid, next.version, :mapping::text::jsonb, :note FROM next
   WHERE NOT EXISTS (SELECT 1 FROM same)
  RETURNING version
)
UPDATE integration SET current_version = coalesce((SELECT version FROM added), current_version)
 WHERE id = :integration_id::uuid
RETURNING current_version, EXISTS (SELECT 1 FROM added) AS added;

-- name: event_by_code
SELECT id::text AS id, name, time_zone FROM event WHERE code = $1;

-- name: integration_overview
SELECT i.id::text AS id, i.code, i.name, i.state, i.target, i.scout_base_url, i.scout_job,
       i.check_seconds, i.creates_units, i.current_version, i.created_at,
       e.code AS event_code, e.time_zone
  FROM integration i JOIN event e ON e.id = i.event_id
 WHERE i.code = $1;

-- name: versions
SELECT version, note, created_at FROM integration_version
 WHERE integration_id = $1::uuid
 ORDER BY version DESC
 LIMIT $2;

-- name: version_spec
-- A version's mapping as JSON text (readable on any connection); null version: the current one.
SELECT v.version, v.spec::text AS spec
  FROM integration_version v
 WHERE v.integration_id = $1::uuid
   AND v.version = coalesce($2::int, (SELECT current_version FROM integration WHERE id = $1::uuid));

-- name: lookup_counts
SELECT kind, count(*)::int AS count FROM integration_lookup
 WHERE integration_id = $1::uuid
 GROUP BY kind
 ORDER BY kind;

-- name: resolve_ours
-- Our ids for what a person gave as "ours", in order: the code of a competitor or unit of the
-- integration's event, or our id. Null: we have no such thing.
SELECT found.id
  FROM unnest(:ours::text[]) WITH ORDINALITY AS v(ours, n)
  LEFT JOIN LATERAL (
    SELECT c.id::text AS id FROM competitor c
     WHERE :kind = 'competitor'
       AND c.event_id = (SELECT event_id FROM integration WHERE id = :integration_id::uuid)
       AND (c.code = v.ours OR c.id::text = v.ours)
    UNION ALL
    SELECT u.id::text FROM unit u
     WHERE :kind = 'unit'
       AND u.event_id = (SELECT event_id FROM integration WHERE id = :integration_id::uuid)
       AND (u.code = v.ours OR u.id::text = v.ours)
    LIMIT 1
  ) found ON true
 ORDER BY v.n;

-- name: add_lookups
INSERT INTO integration_lookup (integration_id, kind, external_id, our_id)
SELECT :integration_id::uuid, :kind, v.external_id, v.our_id
  FROM unnest(:external_ids::text[], :our_ids::uuid[]) AS v(external_id, our_id)
ON CONFLICT (integration_id, kind, external_id) DO UPDATE SET our_id = EXCLUDED.our_id;

-- name: current_key_fields
-- The current version's key fields (a mapping leaving them out keys on externalId), and how
-- many keys the integration knows: `mapping publish` warns when a new version changes them.
SELECT coalesce(v.spec->'key_fields', '["externalId"]'::jsonb)::text AS key_fields,
       (SELECT count(*) FROM integration_key_state k WHERE k.integration_id = i.id) AS keys
  FROM integration i
  LEFT JOIN integration_version v ON v.integration_id = i.id AND v.version = i.current_version
 WHERE i.id = $1::uuid;
