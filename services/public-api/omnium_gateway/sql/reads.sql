-- The public API's reads. Each answers one JSON document (text) and the state that sets how long
-- it may be cached; a missing event or unit answers no row.

-- name: events
SELECT coalesce(json_agg(json_build_object(
         'code', e.code, 'name', e.name, 'time_zone', e.time_zone,
         'starts_on', e.starts_on, 'ends_on', e.ends_on) ORDER BY e.code), '[]')::text AS items
  FROM event e;

-- name: disciplines
SELECT e.code AS event,
       (SELECT coalesce(json_agg(json_build_object(
                 'code', d.code, 'name', d.name,
                 'units', (SELECT count(*) FROM unit u WHERE u.discipline_id = d.id))
               ORDER BY d.code), '[]')
          FROM discipline d WHERE d.event_id = e.id)::text AS items
  FROM event e
 WHERE e.code = $1;

-- name: schedule
-- :event the event's code; :day a day in the event's time zone, :discipline and :status (each
-- or null); :held the disciplines the checker holds by setting. found_discipline is false when
-- :discipline names no discipline of the event. A held unit shows its results as approved.
WITH ev AS (
  SELECT id, code, time_zone FROM event WHERE code = :event
), held AS MATERIALIZED (
  -- Asked once per discipline, not once per unit.
  SELECT d.id FROM ev JOIN discipline d ON d.event_id = ev.id
   WHERE results_held(ev.id, d.code, :held::text[])
), picked AS (
  SELECT u.*, d.code AS discipline, d.id IN (SELECT h.id FROM held h) AS held
    FROM ev
    JOIN unit u ON u.event_id = ev.id
    JOIN discipline d ON d.id = u.discipline_id
   WHERE (:day::date IS NULL OR (u.start_at >= (:day::date)::timestamp AT TIME ZONE ev.time_zone
                               AND u.start_at < (:day::date + 1)::timestamp AT TIME ZONE ev.time_zone))
     AND (:discipline::text IS NULL OR d.code = :discipline)
     AND (:status::text IS NULL OR u.status = :status)
), shown AS (
  SELECT p.*, CASE WHEN p.held THEN approved_unit(p.id) END AS approved FROM picked p
)
SELECT ev.code AS event,
       (:discipline::text IS NULL OR EXISTS (
          SELECT 1 FROM discipline d WHERE d.event_id = ev.id AND d.code = :discipline)) AS found_discipline,
       (SELECT coalesce(json_agg(json_build_object(
                 'code', p.code, 'name', p.name, 'discipline', p.discipline, 'phase', p.phase,
                 'start_at', p.start_at, 'venue', p.venue,
                 'status', p.status,
                 'held', p.held,
                 'sides', CASE WHEN p.held THEN public_sides(p.id, true, p.approved) ELSE
                   (SELECT coalesce(json_agg(json_build_object(
                             'order', s.sort_order,
                             'competitor', CASE WHEN c.id IS NULL THEN NULL ELSE json_build_object(
                                 'code', c.code, 'name', c.name, 'noc', c.noc) END,
                             'score', s.score, 'result', s.result, 'rank', s.rank,
                             'medal', s.medal) ORDER BY s.sort_order), '[]')
                      FROM unit_competitor s
                      LEFT JOIN competitor c ON c.id = s.competitor_id
                     WHERE s.unit_id = p.id) END)
               ORDER BY p.start_at NULLS LAST, p.code), '[]')
          FROM shown p)::text AS items,
       (SELECT array_agg(DISTINCT p.status) FROM picked p) AS statuses
  FROM ev;

-- name: unit
-- :held: the disciplines the checker holds by setting. A held unit shows its sides' results as
-- last approved, and none before its first approval (`held` says so); its status as it is.
WITH found AS (
  SELECT e.code AS event, u.*, d.code AS discipline,
         results_held(e.id, d.code, :held::text[]) AS held
    FROM event e
    JOIN unit u ON u.event_id = e.id AND u.code = :unit_code
    JOIN discipline d ON d.id = u.discipline_id
   WHERE e.code = :event
), shown AS (
  SELECT f.*, CASE WHEN f.held THEN approved_unit(f.id) END AS approved FROM found f
)
SELECT json_build_object(
         'event', x.event, 'code', x.code, 'name', x.name, 'discipline', x.discipline,
         'phase', x.phase, 'start_at', x.start_at, 'venue', x.venue,
         'status', x.status,
         'held', x.held,
         'updated_at', x.updated_at,
         'sides', public_sides(x.id, x.held, x.approved))::text AS body,
       x.status
  FROM shown x;

-- name: medals
-- The whole Games' table (rows with no discipline), best first; :top is the top N or null,
-- :held the disciplines the checker holds by setting. While a unit the checker holds shows a medal its
-- approval does not, the table is held: no rows, `held` true (a medal row cannot say which
-- unit's result it counts, so none is shown that could rest on the waiting one). A row with no
-- medal is not in it (medals.withdraw_row takes a NOC's last medal away so).
WITH ev AS (
  SELECT e.id, e.code, event_medals_held(e.id, :held::text[]) AS held FROM event e WHERE e.code = :event
)
SELECT ev.code AS event, ev.held,
       CASE WHEN ev.held THEN '[]' ELSE
       (SELECT coalesce(json_agg(json_build_object(
                 'rank', m.rank, 'noc', m.noc, 'gold', m.gold, 'silver', m.silver,
                 'bronze', m.bronze, 'total', m.total)
               ORDER BY m.rank NULLS LAST, m.gold DESC, m.silver DESC, m.bronze DESC, m.noc), '[]')
          FROM (SELECT * FROM medal_row r
                 WHERE r.event_id = ev.id AND r.discipline_id IS NULL AND r.total > 0
                 ORDER BY r.rank NULLS LAST, r.gold DESC, r.silver DESC, r.bronze DESC, r.noc
                 LIMIT :top) m)::text END AS items
  FROM ev;
