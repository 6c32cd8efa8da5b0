-- What every screen's navigation shows beside "Waiting for you".

-- name: waiting_count
SELECT count(*)::int FROM review_item WHERE status = 'open';
