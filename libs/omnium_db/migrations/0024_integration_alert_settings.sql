-- The integration file's settings now also carry each integration's alert thresholds (the
-- imports README, "Settings per integration"): the column's comment names every key read.
COMMENT ON COLUMN integration.settings IS
  'Overrides of the service defaults, set from the integration file: min_share, usual_runs, '
  'max_not_placed, max_refused, max_cleared, max_reopened, missing_runs_to_review, '
  'auto_cancel_missing, alert_scout_failed_in_row, alert_batch_failed_times, '
  'alert_quiet_intervals. Other keys are refused when the file is read.';
