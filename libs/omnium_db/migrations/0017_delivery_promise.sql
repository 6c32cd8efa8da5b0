-- The delivery promise (target 4): a client whose share of changes delivered within its target
-- falls under the promise has an alert of its own. A good send does not clear it (one fast file
-- does not make the window good again); the promise check does, once the share is back.
ALTER TABLE delivery_alert DROP CONSTRAINT delivery_alert_kind_check;
ALTER TABLE delivery_alert ADD CONSTRAINT delivery_alert_kind_check
  CHECK (kind IN ('send_failed', 'host_key', 'promise'));

-- The promise reads each client's sends of the last window (15 minutes by default).
CREATE INDEX delivery_attempt_by_client_finished ON delivery_attempt (client_id, finished_at);
