-- The fast path asks "what changed since my last look" by changed_seq or by when it was
-- written, so a change that took its changed_seq early but committed late is still seen.
ALTER TABLE medal_row ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX unit_by_updated_at ON unit (updated_at);
CREATE INDEX medal_row_by_updated_at ON medal_row (updated_at);
