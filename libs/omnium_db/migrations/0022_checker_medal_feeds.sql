-- The checker step on the client medal table feeds (target 7): a client's medal table (and its
-- top-N) waits, as the public one does, while a unit its checker holds shows a medal its newest
-- approval does not. One rule for both: a unit showing a medal not yet approved.

-- Whether a unit shows a medal its newest approval does not (never approved: any medal it shows).
CREATE FUNCTION unit_shows_unapproved_medal(p_unit uuid)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1 FROM unit_competitor s
     WHERE s.unit_id = p_unit AND s.medal IS NOT NULL
       AND NOT EXISTS (
         SELECT 1 FROM jsonb_array_elements(coalesce(approved_unit(p_unit)->'sides', '[]')) a
          WHERE (a->>'order')::int = s.sort_order
            AND a->>'medal' IS NOT DISTINCT FROM s.medal
            AND (a->>'competitor_id')::uuid IS NOT DISTINCT FROM s.competitor_id))
$$;

-- The public medal table (0021), now through the shared rule: held while a unit any checker
-- holds shows a medal its newest approval does not.
CREATE OR REPLACE FUNCTION event_medals_held(p_event uuid, p_codes text[])
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1
      FROM discipline d
      JOIN unit u ON u.discipline_id = d.id
     WHERE d.event_id = p_event
       AND EXISTS (SELECT 1 FROM unit_competitor s WHERE s.unit_id = u.id AND s.medal IS NOT NULL)
       AND results_held(p_event, d.code, p_codes)
       AND unit_shows_unapproved_medal(u.id))
$$;

-- One client's medal table: held while a unit of its scope (a discipline, or null: the whole
-- Games) that its checker holds shows a medal its newest approval does not. What its checker
-- holds: every discipline (p_all), or those in p_codes (its own list and the setting's).
CREATE FUNCTION client_medals_held(p_event uuid, p_discipline uuid, p_codes text[], p_all boolean)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1
      FROM discipline d
      JOIN unit u ON u.discipline_id = d.id
     WHERE d.event_id = p_event
       AND (p_discipline IS NULL OR d.id = p_discipline)
       AND (p_all OR upper(d.code) = ANY (p_codes))
       AND unit_shows_unapproved_medal(u.id))
$$;
