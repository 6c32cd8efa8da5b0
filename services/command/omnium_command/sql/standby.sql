-- The standby watch: how many standbys confirm commits (synchronous or quorum) right now.

-- name: sync_standbys
SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum');
