-- The medal tables' ranks, which follow from their counts.

-- name: rank_medal_rows
-- After a write to an event's medal rows: each table's ranks (the whole Games' and each
-- discipline's) from its counts, gold then silver then bronze, equal counts sharing a rank (the
-- rule Scout's table follows). A page run reads one NOC again, but a medal won moves others down
-- the table too: their ranks must not stay as the last full read left them. A rank a person
-- pinned is kept; a row with no medal has no rank.
UPDATE medal_row m SET rank = r.rank, updated_at = now()
  FROM (SELECT id,
               CASE WHEN total > 0 THEN
                 rank() OVER (PARTITION BY discipline_id, total > 0
                              ORDER BY gold DESC, silver DESC, bronze DESC)::int
               END AS rank
          FROM medal_row WHERE event_id = $1::uuid) r
 WHERE m.id = r.id AND m.rank IS DISTINCT FROM r.rank AND NOT ('rank' = ANY (m.pinned));
