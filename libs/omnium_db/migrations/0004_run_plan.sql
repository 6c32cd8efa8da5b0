-- A run's batches, as first cut: the keys of each batch, in order. A resumed attempt sends the
-- same batches under the same numbers (saved ones answer duplicate), whatever the fast path or
-- the lookups would cut now, so no row can fall between two attempts.
ALTER TABLE integration_run ADD COLUMN plan jsonb;
