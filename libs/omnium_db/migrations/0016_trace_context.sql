-- One trace per change (issue 17): the W3C traceparent of the work that wrote a row, on the two
-- hops that are not calls. A doorbell's job carries the doorbell's trace into the run that works
-- it; an outbox row carries its command's trace to delivery, the gateway's relay and live push.
-- Null when tracing is off. A nullable column with no default: adding it rewrites nothing.
ALTER TABLE integration_job ADD COLUMN trace_context text;
ALTER TABLE domain_event ADD COLUMN trace_context text;
