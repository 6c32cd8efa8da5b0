-- A run left partly done (a batch not saved, say during a database failover) resumes by itself:
-- a job of the same run, queued with a wait before it may be claimed.
ALTER TABLE integration_job DROP CONSTRAINT integration_job_via_check;
ALTER TABLE integration_job ADD CONSTRAINT integration_job_via_check
  CHECK (via IN ('doorbell', 'scheduler', 'operator', 'test', 'resume'));
ALTER TABLE integration_job ADD COLUMN not_before timestamptz;
