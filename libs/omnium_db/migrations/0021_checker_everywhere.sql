-- The checker step on every way out (target 7), not only the public API and live push: gRPC
-- readers (timelines, runs, match states) and the public medal table never show a result the
-- checker holds, and switching a checker on tells the gateway's caches at once.

-- Whether the checker holds a unit's results now (see results_held in 0014).
CREATE FUNCTION unit_results_held(p_unit uuid, p_codes text[])
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT results_held(u.event_id, d.code, p_codes)
                     FROM unit u JOIN discipline d ON d.id = u.discipline_id
                    WHERE u.id = p_unit), false)
$$;

-- The timeline id of a unit's newest approval (0: never approved). Timeline ids are taken
-- under the unit's lock, so a change with a smaller id was saved before that approval and is
-- part of what the person approved; a larger one waits for the next approval.
CREATE FUNCTION unit_approved_through(p_unit uuid)
RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce(max(t.id), 0) FROM timeline_item t
   WHERE t.subject_kind = 'unit' AND t.subject_id = p_unit AND t.code = 'results.approve'
$$;

-- Whether a logged change (a timeline item's or a run row's diff, saved as timeline item
-- `p_item`) carries a result (a side's score, result, rank or medal) of a unit the checker
-- holds that no approval has covered yet.
CREATE FUNCTION diff_holds_results(p_diff jsonb, p_item bigint, p_codes text[])
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1
      FROM (SELECT DISTINCT (c->>'id')::uuid AS unit_id
              FROM jsonb_array_elements(p_diff) c
             WHERE c->>'kind' = 'unit'
               AND c->>'field' ~ '^sides\[[0-9]+\]\.(score|result|rank|medal)$') x
     WHERE unit_results_held(x.unit_id, p_codes)
       AND (p_item IS NULL OR unit_approved_through(x.unit_id) < p_item))
$$;

-- The medals a held unit shows now that its newest approval does not (never approved: every
-- medal it shows): while any is waiting, the whole Games' medal table waits with it.
CREATE FUNCTION event_medals_held(p_event uuid, p_codes text[])
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1
      FROM discipline d
      JOIN unit u ON u.discipline_id = d.id
      JOIN unit_competitor s ON s.unit_id = u.id AND s.medal IS NOT NULL
     WHERE d.event_id = p_event
       AND results_held(p_event, d.code, p_codes)
       AND NOT EXISTS (
         SELECT 1 FROM jsonb_array_elements(coalesce(approved_unit(u.id)->'sides', '[]')) a
          WHERE (a->>'order')::int = s.sort_order
            AND a->>'medal' IS NOT DISTINCT FROM s.medal
            AND (a->>'competitor_id')::uuid IS NOT DISTINCT FROM s.competitor_id))
$$;

-- A client's checker switched on or off (or the client added, removed, turned on or off)
-- changes what every public read of its Games may show: one outbox row says so, and the
-- gateway's relay drops the Games' cached copies at once (they are kept up to 6 h).
CREATE FUNCTION client_checker_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  was_on boolean := false;
  now_on boolean := false;
  the_event uuid;
  the_client uuid;
BEGIN
  IF TG_OP <> 'INSERT' THEN
    was_on := OLD.enabled AND coalesce(OLD.settings->'checker', 'false'::jsonb)
                              NOT IN ('false'::jsonb, '[]'::jsonb);
    the_event := OLD.event_id;
    the_client := OLD.id;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    now_on := NEW.enabled AND coalesce(NEW.settings->'checker', 'false'::jsonb)
                              NOT IN ('false'::jsonb, '[]'::jsonb);
    the_event := NEW.event_id;
    the_client := NEW.id;
  END IF;
  -- A client removed with its Games has no Games left to tell about.
  IF NOT EXISTS (SELECT 1 FROM event e WHERE e.id = the_event) THEN
    RETURN NULL;
  END IF;
  IF was_on OR now_on THEN
    IF TG_OP = 'UPDATE' AND was_on = now_on
       AND OLD.settings->'checker' IS NOT DISTINCT FROM NEW.settings->'checker'
       AND OLD.event_id = NEW.event_id THEN
      RETURN NULL;
    END IF;
    INSERT INTO domain_event (event_id, kind, subject_kind, subject_id, seq, command_id, payload)
    VALUES (the_event, 'checker.changed', 'client', the_client, nextval('change_seq'),
            'checker:' || the_client || ':' || txid_current(),
            jsonb_build_object('checker', CASE WHEN now_on THEN NEW.settings->'checker'
                                               ELSE 'false'::jsonb END));
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER client_checker_changed
  AFTER INSERT OR UPDATE OR DELETE ON client
  FOR EACH ROW EXECUTE FUNCTION client_checker_changed();
