-- Placeholder so this branch's migrations have no gap; the lead replaces it with the
-- real 0009 migration from another branch when merging.
SELECT 1;
