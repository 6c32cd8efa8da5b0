-- Setting integrations up: reference data, the integration, its mapping version, lookups.

-- name: upsert_event
INSERT INTO event (code, name, time_zone, starts_on, ends_on)
VALUES ($1, $2, $3, $4::date, $5::date)
ON CONFLICT (code) DO UPDATE SET name = EXCLUDED.name, time_zone = EXCLUDED.time_zone
RETURNING id::text;

-- name: upsert_disciplines
INSERT INTO discipline (event_id, code, name)
SELECT $1::uuid, v.code, v.name FROM unnest($2::text[], $3::text[]) AS v(code, name)
ON CONFLICT (event_id, code) DO UPDATE SET name = EXCLUDED.name;

-- name: upsert_competitors
-- Competitors keyed by our own code, which for reference loaded from Scout is Scout's id.
INSERT INTO competitor (event_id, discipline_id, kind, code, name, noc)
SELECT $1::uuid, d.id, v.kind, v.code, v.name, v.noc
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
       AS v(code, name, noc, kind, discipline)
  LEFT JOIN discipline d ON d.event_id = $1::uuid AND d.code = v.discipline
ON CONFLICT (event_id, code) DO NOTHING;

-- name: competitor_ids
SELECT code, id::text FROM competitor
 WHERE event_id = $1::uuid AND code = ANY($2::text[]);

-- name: upsert_integration
INSERT INTO integration (code, event_id, name, state, target, scout_base_url, scout_job, secret,
                         check_seconds, creates_units)
VALUES ($1, (SELECT id FROM event WHERE code = $2), $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (code) DO UPDATE SET
  name = EXCLUDED.name, target = EXCLUDED.target, scout_base_url = EXCLUDED.scout_base_url,
  scout_job = EXCLUDED.scout_job, secret = EXCLUDED.secret,
  check_seconds = EXCLUDED.check_seconds, creates_units = EXCLUDED.creates_units
RETURNING id::text;

-- name: add_version
-- A new version of the mapping, made current. Old versions stay: runs name the one they used.
WITH next AS (
  SELECT coalesce(max(version), 0) + 1 AS version
    FROM integration_version WHERE integration_id = $1::uuid
), added AS (
  INSERT INTO integration_version (integration_id, version, spec, note)
  SELECT $1::uuid, next.version, $2::jsonb, $3 FROM next
  RETURNING version
)
UPDATE integration SET current_version = (SELECT version FROM added)
 WHERE id = $1::uuid
RETURNING current_version;

-- name: add_lookups
INSERT INTO integration_lookup (integration_id, kind, external_id, our_id)
SELECT $1::uuid, $2, v.external_id, v.our_id
  FROM unnest($3::text[], $4::uuid[]) AS v(external_id, our_id)
ON CONFLICT (integration_id, kind, external_id) DO UPDATE SET our_id = EXCLUDED.our_id;
