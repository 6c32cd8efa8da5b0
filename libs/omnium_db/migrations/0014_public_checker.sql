-- The checker step for the public API and live push (target 7): while a client's or a
-- discipline's checker holds a unit's results, fans see them only as a person approved them,
-- exactly as the client files do. These functions are shared by the gateway's reads and
-- delivery's live push.

-- Whether a discipline's results are held for everyone: it is in the setting's list
-- (OMNIUM_CHECKER_DISCIPLINES, passed in), or an enabled client of the event has its checker
-- on for every discipline (true) or for this one (a list of codes).
CREATE FUNCTION results_held(p_event uuid, p_discipline text, p_codes text[])
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT upper(p_discipline) = ANY (p_codes) OR EXISTS (
    SELECT 1 FROM client c
     WHERE c.event_id = p_event AND c.enabled
       AND (c.settings->'checker' = 'true'::jsonb
            OR (jsonb_typeof(c.settings->'checker') = 'array'
                AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(c.settings->'checker') x
                             WHERE upper(x) = upper(p_discipline)))))
$$;

-- A unit's newest approval: its results as the person approved them (null: never approved).
CREATE FUNCTION approved_unit(p_unit uuid) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT a.payload->'unit' FROM domain_event a
   WHERE a.unit_id = p_unit AND a.kind = 'results.approved'
   ORDER BY a.id DESC LIMIT 1
$$;

CREATE INDEX domain_event_unit_approvals ON domain_event (unit_id, id DESC)
  WHERE kind = 'results.approved';

-- A unit's sides as the public API shows them. Not held: as saved. Held and approved: as
-- approved. Held and never approved: who takes part, and no results yet.
CREATE FUNCTION public_sides(p_unit uuid, p_held boolean, p_approved jsonb)
RETURNS json LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_held AND p_approved IS NOT NULL THEN
      (SELECT coalesce(json_agg(json_build_object(
                 'order', (a->>'order')::int,
                 'competitor', CASE WHEN c.id IS NULL THEN NULL ELSE json_build_object(
                     'code', c.code, 'name', c.name, 'noc', c.noc) END,
                 'score', a->>'score', 'result', a->>'result', 'rank', (a->>'rank')::int,
                 'medal', a->>'medal') ORDER BY (a->>'order')::int), '[]')
         FROM jsonb_array_elements(p_approved->'sides') a
         LEFT JOIN competitor c ON c.id = (a->>'competitor_id')::uuid)
    ELSE
      (SELECT coalesce(json_agg(json_build_object(
                 'order', s.sort_order,
                 'competitor', CASE WHEN c.id IS NULL THEN NULL ELSE json_build_object(
                     'code', c.code, 'name', c.name, 'noc', c.noc) END,
                 'score', CASE WHEN p_held THEN NULL ELSE s.score END,
                 'result', CASE WHEN p_held THEN NULL ELSE s.result END,
                 'rank', CASE WHEN p_held THEN NULL ELSE s.rank END,
                 'medal', CASE WHEN p_held THEN NULL ELSE s.medal END)
               ORDER BY s.sort_order), '[]')
         FROM unit_competitor s
         LEFT JOIN competitor c ON c.id = s.competitor_id
        WHERE s.unit_id = p_unit)
  END
$$;
