-- Whether a run passed the size check (the too-few guard) on its own: set when it goes through
-- its guards, and kept when a person starts it past them. Only such runs make up the usual size
-- and count keys as missing: a short run a person started is written, but it says nothing of
-- what Scout lists. Null: the run had no size check (a page run, or one that never got there).
ALTER TABLE integration_run ADD COLUMN sized boolean;

-- Runs from before: a pause names its guard in its reason; a run a person started past its
-- guards may have been short, so it is left out rather than trusted.
UPDATE integration_run SET sized = reason NOT LIKE 'Scout sent % rows; it usually sends about %'
 WHERE status = 'paused_by_guard' AND build <> 'page';
UPDATE integration_run r
   SET sized = NOT EXISTS (SELECT 1 FROM integration_job j
                            WHERE j.run_id = r.id AND j.past_guards)
 WHERE r.status IN ('done', 'partly_done') AND r.build <> 'page';
