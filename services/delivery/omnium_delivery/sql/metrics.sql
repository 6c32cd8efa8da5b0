-- What /metrics reads every metrics_sample_seconds.

-- name: outbox_lag
-- The age of the oldest saved change delivery has not read from the outbox, or, if older, of the
-- newest change an owed feed waits to send (a lower bound for that feed: the feed keeps only
-- its newest change's id); and how many feeds are owed.
SELECT coalesce(greatest(
         (SELECT extract(epoch FROM clock_timestamp() - min(e.saved_at)) FROM domain_event e
           WHERE e.id > (SELECT last_id FROM delivery_cursor WHERE name = 'outbox')),
         (SELECT extract(epoch FROM clock_timestamp() - min(e.saved_at))
            FROM client_feed f JOIN domain_event e ON e.id = f.wanted_id
           WHERE f.marks > f.built_marks)), 0)::float8 AS lag,
       (SELECT count(*) FROM client_feed WHERE marks > built_marks)::int AS owed;
