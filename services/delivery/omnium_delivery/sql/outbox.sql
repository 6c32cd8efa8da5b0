-- Reading the outbox (domain_event) and marking the feeds each change touches.

-- name: claim_cursor
-- One copy reads the outbox at a time; the others skip, the holder reads for them.
SELECT last_id, recent_ids FROM delivery_cursor WHERE name = 'outbox' FOR UPDATE SKIP LOCKED;

-- name: wake_readers
-- The outbox readers look again: a copy that stopped mid-pass left its rows unread.
SELECT pg_notify('omnium_domain_event', '');

-- name: read_outbox
-- Past the cursor, and rows saved within the lag window not read yet: a transaction that took an id
-- early and committed late is still read once. `held`: the checker holds the unit's results for
-- everyone (:held_disciplines: the disciplines held by setting), so live push leaves them out; for
-- a medal row, the public medal table is held (a medal waits for approval), so live push leaves the
-- row's change out as /medals leaves the rows out.
WITH batch AS (
  SELECT d.* FROM domain_event d
   WHERE d.id > :after_id
      OR (d.saved_at > clock_timestamp() - make_interval(secs => :lag_seconds::float8)
          AND NOT d.id = ANY(:recent_ids::bigint[]))
   ORDER BY d.id
   LIMIT :batch_size
),
-- Asked once per Games in the batch, not once per medal row (an import brings dozens).
medal_tables AS (
  SELECT x.event_id, event_medals_held(x.event_id, :held_disciplines::text[]) AS held
    FROM (SELECT DISTINCT b.event_id FROM batch b WHERE b.subject_kind = 'medal_row') x
)
SELECT d.id, d.kind, d.subject_kind, d.unit_id::text, e.code AS event_code, d.payload, d.saved_at,
       d.trace_context,
       CASE WHEN d.subject_kind = 'medal_row' THEN coalesce(m.held, false)
            ELSE coalesce(results_held(d.event_id, dd.code, :held_disciplines::text[]), false) END AS held
  FROM batch d
  JOIN event e ON e.id = d.event_id
  LEFT JOIN unit u ON u.id = d.unit_id
  LEFT JOIN discipline dd ON dd.id = u.discipline_id
  LEFT JOIN medal_tables m ON m.event_id = d.event_id
 ORDER BY d.id;

-- name: move_cursor
-- recent_ids keeps only what is still inside the lag window.
UPDATE delivery_cursor SET
  last_id = greatest(last_id, :last_id),
  recent_ids = coalesce((SELECT array_agg(d.id ORDER BY d.id) FROM domain_event d
                          WHERE d.id = ANY(:recent_ids::bigint[])
                            AND d.saved_at > clock_timestamp() - make_interval(secs => :lag_seconds::float8)), '{}'),
  updated_at = now()
 WHERE name = 'outbox';

-- name: mark_feeds
-- The feeds these outbox rows touch owe a rebuild. A feed not owed yet opens its debounce window now; one already owed keeps its window,
-- so a burst of writes is one rebuild per window.
WITH ev AS (
  SELECT d.id, d.event_id, d.subject_kind,
         coalesce(u.discipline_id, m.discipline_id) AS discipline_id,
         -- Only results changed (scores, ranks, medals): a schedule shows none of them.
         d.kind = 'unit.changed' AND NOT EXISTS (
           SELECT 1 FROM jsonb_array_elements(d.payload->'changes') c
            WHERE c->>'field' !~ '^sides\[[0-9]+\]\.(score|result|rank|medal)$'
         ) AS results_only,
         -- An approval, or a side's medal saved: it may hold or free a medal table (checker).
         d.subject_kind = 'unit' AND (d.kind = 'results.approved' OR EXISTS (
           SELECT 1 FROM jsonb_array_elements(coalesce(d.payload->'changes', '[]')) c
            WHERE c->>'field' ~ '^sides\[[0-9]+\]\.medal$'
         )) AS medals
    FROM domain_event d
    LEFT JOIN unit u ON u.id = d.unit_id
    LEFT JOIN medal_row m ON d.subject_kind = 'medal_row' AND m.id = d.subject_id
   WHERE d.id = ANY(:event_ids::bigint[])
),
hits AS (
  SELECT f.id, max(ev.id) AS top
    FROM client_feed f
    JOIN client c ON c.id = f.client_id AND c.enabled
    JOIN ev ON ev.event_id = c.event_id
   WHERE (f.kind IN ('schedule', 'results')
          AND NOT (f.kind = 'schedule' AND ev.results_only)
          AND (ev.subject_kind = 'competitor'
               OR (ev.subject_kind = 'unit'
                   AND (f.discipline_id IS NULL OR f.discipline_id = ev.discipline_id))))
      OR (f.kind = 'medals' AND ev.subject_kind = 'medal_row'
          AND f.discipline_id IS NOT DISTINCT FROM ev.discipline_id)
      OR (f.kind = 'medals' AND ev.medals
          AND (f.discipline_id IS NULL OR f.discipline_id = ev.discipline_id))
   GROUP BY f.id
)
UPDATE client_feed f SET
  due_at = CASE WHEN f.marks > f.built_marks AND f.due_at IS NOT NULL THEN f.due_at
                ELSE clock_timestamp()
                     + make_interval(secs => CASE WHEN f.live THEN :live_debounce_seconds::float8 ELSE :debounce_seconds::float8 END) END,
  marks = f.marks + 1,
  wanted_id = greatest(f.wanted_id, h.top)
  FROM hits h
 WHERE f.id = h.id
RETURNING f.id;

-- name: sweep
-- Every built feed is checked again: rebuilt, and sent only if its bytes changed. This catches
-- what no outbox id can show, such as a change that committed after a later one was built.
UPDATE client_feed f SET marks = f.marks + 1, due_at = coalesce(f.due_at, clock_timestamp())
  FROM client c
 WHERE c.id = f.client_id AND c.enabled AND f.marks <= f.built_marks
RETURNING f.id;

-- name: next_due
SELECT extract(epoch FROM min(f.due_at) - clock_timestamp())::float8
  FROM client_feed f JOIN client c ON c.id = f.client_id AND c.enabled
 WHERE (f.marks > f.built_marks OR f.force)
   AND NOT c.id = ANY($2::uuid[])
   AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp() OR c.leased_by = $1);
