-- The schema every migration in libs/omnium_db/migrations/ adds up to, as pg_dump
-- --schema-only prints it (owners, grants and session settings left out). Written by `make schema`;
-- tests/integration/test_schema_file.py fails when it and the migrations disagree. Read it;
-- never apply it: the migrations are what change a database.

--
-- PostgreSQL database dump
--

--
-- Name: pgcrypto; Type: EXTENSION; Schema: -; Owner: -
--

CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA public;

--
-- Name: EXTENSION pgcrypto; Type: COMMENT; Schema: -; Owner: -
--

COMMENT ON EXTENSION pgcrypto IS 'cryptographic functions';

--
-- Name: road_competitor; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.road_competitor AS (
	id text,
	code text,
	event_id text,
	name text,
	noc text,
	pinned text[],
	changed_seq bigint
);

--
-- Name: road_medal_row; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.road_medal_row AS (
	id text,
	ref text,
	event_id text,
	gold integer,
	silver integer,
	bronze integer,
	total integer,
	rank integer,
	pinned text[],
	changed_seq bigint
);

--
-- Name: road_side; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.road_side AS (
	unit_id text,
	id text,
	"order" integer,
	competitor_id text,
	score text,
	result text,
	rank integer,
	medal text,
	pinned text[]
);

--
-- Name: road_unit; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.road_unit AS (
	id text,
	code text,
	event_id text,
	name text,
	phase text,
	start_at timestamp with time zone,
	venue text,
	status text,
	pinned text[],
	changed_seq bigint,
	match_seq integer
);

--
-- Name: approved_unit(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.approved_unit(p_unit uuid) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  SELECT a.payload->'unit' FROM domain_event a
   WHERE a.unit_id = p_unit AND a.kind = 'results.approved'
   ORDER BY a.id DESC LIMIT 1
$$;

--
-- Name: client_checker_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.client_checker_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: client_medals_held(uuid, uuid, text[], boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.client_medals_held(p_event uuid, p_discipline uuid, p_codes text[], p_all boolean) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  SELECT EXISTS (
    SELECT 1
      FROM discipline d
      JOIN unit u ON u.discipline_id = d.id
     WHERE d.event_id = p_event
       AND (p_discipline IS NULL OR d.id = p_discipline)
       AND (p_all OR upper(d.code) = ANY (p_codes))
       AND unit_shows_unapproved_medal(u.id))
$$;

--
-- Name: diff_holds_results(jsonb, bigint, text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.diff_holds_results(p_diff jsonb, p_item bigint, p_codes text[]) RETURNS boolean
    LANGUAGE sql STABLE
    AS $_$
  SELECT EXISTS (
    SELECT 1
      FROM (SELECT DISTINCT (c->>'id')::uuid AS unit_id
              FROM jsonb_array_elements(p_diff) c
             WHERE c->>'kind' = 'unit'
               AND c->>'field' ~ '^sides\[[0-9]+\]\.(score|result|rank|medal)$') x
     WHERE unit_results_held(x.unit_id, p_codes)
       AND (p_item IS NULL OR unit_approved_through(x.unit_id) < p_item))
$_$;

--
-- Name: domain_event_notify(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.domain_event_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM pg_notify('omnium_domain_event', (SELECT max(id)::text FROM new_rows));
  RETURN NULL;
END $$;

--
-- Name: event_medals_held(uuid, text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.event_medals_held(p_event uuid, p_codes text[]) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  SELECT EXISTS (
    SELECT 1
      FROM discipline d
      JOIN unit u ON u.discipline_id = d.id
     WHERE d.event_id = p_event
       AND EXISTS (SELECT 1 FROM unit_competitor s WHERE s.unit_id = u.id AND s.medal IS NOT NULL)
       AND results_held(p_event, d.code, p_codes)
       AND unit_shows_unapproved_medal(u.id))
$$;

--
-- Name: notify_scorer_assignment(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.notify_scorer_assignment() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM pg_notify('omnium_scorer_assignment', '');
  RETURN NULL;
END
$$;

--
-- Name: public_sides(uuid, boolean, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.public_sides(p_unit uuid, p_held boolean, p_approved jsonb) RETURNS json
    LANGUAGE sql STABLE
    AS $$
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

--
-- Name: results_held(uuid, text, text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.results_held(p_event uuid, p_discipline text, p_codes text[]) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  SELECT upper(p_discipline) = ANY (p_codes) OR EXISTS (
    SELECT 1 FROM client c
     WHERE c.event_id = p_event AND c.enabled
       AND (c.settings->'checker' = 'true'::jsonb
            OR (jsonb_typeof(c.settings->'checker') = 'array'
                AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(c.settings->'checker') x
                             WHERE upper(x) = upper(p_discipline)))))
$$;

--
-- Name: unit_approved_through(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.unit_approved_through(p_unit uuid) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce(max(t.id), 0) FROM timeline_item t
   WHERE t.subject_kind = 'unit' AND t.subject_id = p_unit AND t.code = 'results.approve'
$$;

--
-- Name: unit_results_held(uuid, text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.unit_results_held(p_unit uuid, p_codes text[]) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce((SELECT results_held(u.event_id, d.code, p_codes)
                     FROM unit u JOIN discipline d ON d.id = u.discipline_id
                    WHERE u.id = p_unit), false)
$$;

--
-- Name: unit_scorers(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.unit_scorers(p_unit uuid) RETURNS TABLE(account_id uuid)
    LANGUAGE sql STABLE
    AS $$
  SELECT s.account_id FROM scorer_assignment s WHERE s.unit_id = p_unit
  UNION ALL
  SELECT s.account_id
    FROM unit u
    JOIN event e ON e.id = u.event_id
    JOIN scorer_assignment s
      ON s.unit_id IS NULL AND s.event_id = u.event_id AND s.venue = u.venue
     AND s.day = (u.start_at AT TIME ZONE e.time_zone)::date
   WHERE u.id = p_unit
     AND NOT EXISTS (SELECT 1 FROM scorer_assignment x WHERE x.unit_id = p_unit)
$$;

--
-- Name: unit_shows_unapproved_medal(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.unit_shows_unapproved_medal(p_unit uuid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  SELECT EXISTS (
    SELECT 1 FROM unit_competitor s
     WHERE s.unit_id = p_unit AND s.medal IS NOT NULL
       AND NOT EXISTS (
         SELECT 1 FROM jsonb_array_elements(coalesce(approved_unit(p_unit)->'sides', '[]')) a
          WHERE (a->>'order')::int = s.sort_order
            AND a->>'medal' IS NOT DISTINCT FROM s.medal
            AND (a->>'competitor_id')::uuid IS NOT DISTINCT FROM s.competitor_id))
$$;

--
-- Name: account; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.account (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    login text NOT NULL,
    name text NOT NULL,
    role text NOT NULL,
    password_hash text NOT NULL,
    disabled boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    failed_sign_ins integer DEFAULT 0 NOT NULL,
    locked_until timestamp with time zone,
    CONSTRAINT account_login_check CHECK ((login ~ '^[a-z0-9._@-]{2,64}$'::text)),
    CONSTRAINT account_role_check CHECK ((role = ANY (ARRAY['admin'::text, 'operator'::text, 'scorer'::text, 'viewer'::text])))
);

--
-- Name: account_change; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.account_change (
    id bigint NOT NULL,
    login text NOT NULL,
    change text NOT NULL,
    by_name text NOT NULL,
    by_source text,
    at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: account_change_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.account_change ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.account_change_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: account_session; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.account_session (
    token_hash bytea NOT NULL,
    account_id uuid NOT NULL,
    csrf_token text NOT NULL,
    screen text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: alert; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.alert (
    id bigint NOT NULL,
    integration_id uuid NOT NULL,
    kind text NOT NULL,
    message text NOT NULL,
    run_id uuid,
    status text DEFAULT 'open'::text NOT NULL,
    raised_at timestamp with time zone DEFAULT now() NOT NULL,
    cleared_at timestamp with time zone,
    sent_at timestamp with time zone,
    CONSTRAINT alert_kind_check CHECK ((kind = ANY (ARRAY['run_failed'::text, 'scout_failed'::text, 'batch_failed'::text, 'guard'::text, 'quiet'::text]))),
    CONSTRAINT alert_status_check CHECK ((status = ANY (ARRAY['open'::text, 'cleared'::text])))
);

--
-- Name: alert_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.alert ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.alert_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: api_key; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_key (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    name text NOT NULL,
    key_hash text NOT NULL,
    rate_per_second double precision,
    burst integer,
    disabled boolean DEFAULT false NOT NULL,
    made_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT api_key_burst_check CHECK ((burst >= 1)),
    CONSTRAINT api_key_name_check CHECK ((name ~ '^[a-z0-9._-]{2,64}$'::text)),
    CONSTRAINT api_key_rate_per_second_check CHECK ((rate_per_second > (0)::double precision))
);

--
-- Name: change_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.change_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: client; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.client (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    code text NOT NULL,
    name text NOT NULL,
    event_id uuid NOT NULL,
    transport text NOT NULL,
    settings jsonb DEFAULT '{}'::jsonb NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    leased_by text,
    lease_until timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT client_code_check CHECK ((code ~ '^[a-z0-9][a-z0-9_-]{1,39}$'::text)),
    CONSTRAINT client_transport_check CHECK ((transport = ANY (ARRAY['sftp'::text, 'webhook'::text])))
);

--
-- Name: client_feed; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.client_feed (
    id bigint NOT NULL,
    client_id uuid NOT NULL,
    kind text NOT NULL,
    format text NOT NULL,
    discipline_id uuid,
    top_n integer,
    live boolean DEFAULT false NOT NULL,
    marks bigint DEFAULT 1 NOT NULL,
    built_marks bigint DEFAULT 0 NOT NULL,
    wanted_id bigint DEFAULT 0 NOT NULL,
    built_id bigint DEFAULT 0 NOT NULL,
    due_at timestamp with time zone DEFAULT now(),
    force boolean DEFAULT false NOT NULL,
    version integer DEFAULT 0 NOT NULL,
    content_sha text,
    delivered_version integer,
    delivered_content_sha text,
    delivered_sha256 text,
    delivered_at timestamp with time zone,
    CONSTRAINT client_feed_format_check CHECK ((format = ANY (ARRAY['json'::text, 'csv'::text, 'odf'::text]))),
    CONSTRAINT client_feed_kind_check CHECK ((kind = ANY (ARRAY['schedule'::text, 'results'::text, 'medals'::text]))),
    CONSTRAINT client_feed_top_n_check CHECK ((top_n >= 1))
);

--
-- Name: client_feed_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.client_feed ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.client_feed_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: command; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command (
    command_id text NOT NULL,
    code text NOT NULL,
    source_code text,
    request_hash bytea,
    outcome text NOT NULL,
    answer bytea NOT NULL,
    seq bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT command_command_id_check CHECK (((length(command_id) >= 1) AND (length(command_id) <= 200)))
);

--
-- Name: competitor; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.competitor (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    event_id uuid NOT NULL,
    discipline_id uuid,
    kind text NOT NULL,
    code text NOT NULL,
    name text NOT NULL,
    noc text NOT NULL,
    pinned text[] DEFAULT '{}'::text[] NOT NULL,
    changed_seq bigint DEFAULT nextval('public.change_seq'::regclass) NOT NULL,
    CONSTRAINT competitor_kind_check CHECK ((kind = ANY (ARRAY['team'::text, 'person'::text]))),
    CONSTRAINT competitor_noc_check CHECK ((noc ~ '^[A-Z]{3}$'::text))
);

--
-- Name: delivery_alert; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.delivery_alert (
    id bigint NOT NULL,
    client_id uuid NOT NULL,
    kind text NOT NULL,
    message text NOT NULL,
    status text DEFAULT 'open'::text NOT NULL,
    raised_at timestamp with time zone DEFAULT now() NOT NULL,
    cleared_at timestamp with time zone,
    sent_at timestamp with time zone,
    CONSTRAINT delivery_alert_kind_check CHECK ((kind = ANY (ARRAY['send_failed'::text, 'host_key'::text, 'promise'::text]))),
    CONSTRAINT delivery_alert_status_check CHECK ((status = ANY (ARRAY['open'::text, 'cleared'::text])))
);

--
-- Name: delivery_alert_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.delivery_alert ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.delivery_alert_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: delivery_attempt; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.delivery_attempt (
    id bigint NOT NULL,
    client_id uuid NOT NULL,
    feed_id bigint NOT NULL,
    version integer NOT NULL,
    file_name text NOT NULL,
    sha256 text NOT NULL,
    bytes integer NOT NULL,
    attempts integer NOT NULL,
    outcome text NOT NULL,
    error text,
    outbox_id bigint,
    saved_at timestamp with time zone,
    delivered_at timestamp with time zone,
    finished_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    resend boolean DEFAULT false NOT NULL,
    CONSTRAINT delivery_attempt_outcome_check CHECK ((outcome = ANY (ARRAY['delivered'::text, 'failed'::text, 'refused'::text])))
);

--
-- Name: delivery_attempt_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.delivery_attempt ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.delivery_attempt_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: delivery_cursor; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.delivery_cursor (
    name text NOT NULL,
    last_id bigint DEFAULT 0 NOT NULL,
    recent_ids bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: discipline; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.discipline (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    event_id uuid NOT NULL,
    code text NOT NULL,
    name text NOT NULL,
    sport_file text,
    changed_seq bigint DEFAULT nextval('public.change_seq'::regclass) NOT NULL,
    CONSTRAINT discipline_code_check CHECK ((code ~ '^[A-Z]{3}$'::text))
);

--
-- Name: domain_event; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.domain_event (
    id bigint NOT NULL,
    event_id uuid NOT NULL,
    kind text NOT NULL,
    subject_kind text NOT NULL,
    subject_id uuid NOT NULL,
    unit_id uuid,
    seq bigint NOT NULL,
    command_id text NOT NULL,
    payload jsonb NOT NULL,
    saved_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    trace_context text
);

--
-- Name: domain_event_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.domain_event ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.domain_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: entry; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.entry (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    event_id uuid NOT NULL,
    discipline_id uuid NOT NULL,
    event_name text NOT NULL,
    competitor_id uuid NOT NULL,
    status text DEFAULT 'ENTERED'::text NOT NULL,
    pinned text[] DEFAULT '{}'::text[] NOT NULL,
    changed_seq bigint DEFAULT nextval('public.change_seq'::regclass) NOT NULL
);

--
-- Name: event; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    code text NOT NULL,
    name text NOT NULL,
    time_zone text DEFAULT 'UTC'::text NOT NULL,
    starts_on date,
    ends_on date,
    changed_seq bigint DEFAULT nextval('public.change_seq'::regclass) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT event_code_check CHECK ((code ~ '^[A-Z0-9_-]{2,32}$'::text))
);

--
-- Name: integration; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.integration (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    code text NOT NULL,
    event_id uuid NOT NULL,
    name text NOT NULL,
    state text DEFAULT 'on'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    target text DEFAULT 'unit'::text NOT NULL,
    scout_base_url text DEFAULT ''::text NOT NULL,
    scout_job text DEFAULT ''::text NOT NULL,
    secret text DEFAULT ''::text NOT NULL,
    previous_secret text,
    check_seconds integer DEFAULT 600 NOT NULL,
    creates_units boolean DEFAULT false NOT NULL,
    current_version integer,
    last_heard_at timestamp with time zone,
    settings jsonb DEFAULT '{}'::jsonb NOT NULL,
    previous_secret_until timestamp with time zone,
    CONSTRAINT integration_check_seconds_check CHECK ((check_seconds > 0)),
    CONSTRAINT integration_code_check CHECK ((code ~ '^[a-z0-9][a-z0-9-]{1,62}$'::text)),
    CONSTRAINT integration_state_check CHECK ((state = ANY (ARRAY['on'::text, 'paused'::text, 'off'::text]))),
    CONSTRAINT integration_target_check CHECK ((target = ANY (ARRAY['unit'::text, 'medal_row'::text])))
);

--
-- Name: COLUMN integration.settings; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.integration.settings IS 'Overrides of the service defaults, set from the integration file: min_share, usual_runs, max_not_placed, max_refused, max_cleared, max_reopened, missing_runs_to_review, auto_cancel_missing, alert_scout_failed_in_row, alert_batch_failed_times, alert_quiet_intervals. Other keys are refused when the file is read.';

--
-- Name: integration_job; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.integration_job (
    id bigint NOT NULL,
    integration_id uuid NOT NULL,
    kind text NOT NULL,
    scout_run_id text,
    via text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    lease_until timestamp with time zone,
    worker text,
    run_id uuid,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    past_guards boolean DEFAULT false NOT NULL,
    not_before timestamp with time zone,
    trace_context text,
    CONSTRAINT integration_job_kind_check CHECK ((kind = ANY (ARRAY['pull'::text, 'check'::text]))),
    CONSTRAINT integration_job_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'done'::text, 'failed'::text]))),
    CONSTRAINT integration_job_via_check CHECK ((via = ANY (ARRAY['doorbell'::text, 'scheduler'::text, 'operator'::text, 'test'::text, 'resume'::text])))
);

--
-- Name: integration_job_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.integration_job ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.integration_job_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: integration_key_state; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.integration_key_state (
    integration_id uuid NOT NULL,
    subject_key text NOT NULL,
    subject_kind text NOT NULL,
    subject_id uuid,
    last_hash bytea,
    applied_seq bigint,
    last_seen_run uuid,
    missing_runs integer DEFAULT 0 NOT NULL,
    official_at timestamp with time zone,
    next_read_at timestamp with time zone,
    missed_in_run uuid,
    missing_answered boolean DEFAULT false NOT NULL,
    read_asked_at timestamp with time zone
);

--
-- Name: integration_lookup; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.integration_lookup (
    integration_id uuid NOT NULL,
    kind text NOT NULL,
    external_id text NOT NULL,
    our_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT integration_lookup_kind_check CHECK ((kind = ANY (ARRAY['competitor'::text, 'unit'::text])))
);

--
-- Name: integration_row; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.integration_row (
    id bigint NOT NULL,
    run_id uuid NOT NULL,
    integration_id uuid NOT NULL,
    batch_no integer,
    "position" integer NOT NULL,
    subject_key text NOT NULL,
    subject_kind text NOT NULL,
    subject_id uuid,
    row_hash bytea,
    outcome text NOT NULL,
    reason text,
    diff jsonb DEFAULT '[]'::jsonb NOT NULL,
    kept_by_hand jsonb DEFAULT '[]'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT integration_row_outcome_check CHECK ((outcome = ANY (ARRAY['accepted'::text, 'unchanged'::text, 'kept_by_hand'::text, 'refused'::text, 'not_placed'::text, 'held'::text, 'skipped'::text, 'older'::text, 'problem'::text])))
);

--
-- Name: integration_row_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.integration_row ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.integration_row_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: integration_run; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.integration_run (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    integration_id uuid NOT NULL,
    scout_run_id text NOT NULL,
    status text NOT NULL,
    scout_status text,
    build text,
    row_count integer,
    batch_total integer,
    batch_done integer DEFAULT 0 NOT NULL,
    reason text,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    version integer,
    job_id bigint,
    scout_finished_at timestamp with time zone,
    day date,
    outcomes jsonb DEFAULT '{}'::jsonb NOT NULL,
    started_at timestamp with time zone,
    plan jsonb,
    sized boolean,
    CONSTRAINT integration_run_build_check CHECK ((build = ANY (ARRAY['all'::text, 'day'::text, 'page'::text]))),
    CONSTRAINT integration_run_scout_status_check CHECK ((scout_status = ANY (ARRAY['passed'::text, 'failed'::text]))),
    CONSTRAINT integration_run_status_check CHECK ((status = ANY (ARRAY['received'::text, 'applying'::text, 'done'::text, 'partly_done'::text, 'failed'::text, 'scout_failed'::text, 'older'::text, 'paused_by_guard'::text])))
);

--
-- Name: integration_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.integration_version (
    integration_id uuid NOT NULL,
    version integer NOT NULL,
    spec jsonb NOT NULL,
    note text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT integration_version_version_check CHECK ((version >= 1))
);

--
-- Name: match_action; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.match_action (
    unit_id uuid NOT NULL,
    seq integer NOT NULL,
    command_id text NOT NULL,
    kind text NOT NULL,
    side integer,
    fields jsonb DEFAULT '{}'::jsonb NOT NULL,
    undoes integer,
    undone_by integer,
    actor_kind text NOT NULL,
    actor_name text NOT NULL,
    source_code text,
    screen text,
    client_at timestamp with time zone,
    saved_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT match_action_seq_check CHECK ((seq >= 1))
);

--
-- Name: medal_row; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.medal_row (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    event_id uuid NOT NULL,
    discipline_id uuid,
    noc text NOT NULL,
    gold integer DEFAULT 0 NOT NULL,
    silver integer DEFAULT 0 NOT NULL,
    bronze integer DEFAULT 0 NOT NULL,
    total integer DEFAULT 0 NOT NULL,
    rank integer,
    pinned text[] DEFAULT '{}'::text[] NOT NULL,
    changed_seq bigint DEFAULT nextval('public.change_seq'::regclass) NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT medal_row_bronze_check CHECK ((bronze >= 0)),
    CONSTRAINT medal_row_gold_check CHECK ((gold >= 0)),
    CONSTRAINT medal_row_noc_check CHECK ((noc ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT medal_row_rank_check CHECK ((rank >= 1)),
    CONSTRAINT medal_row_silver_check CHECK ((silver >= 0)),
    CONSTRAINT medal_row_total_check CHECK ((total >= 0))
);

--
-- Name: provider; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider (
    code text NOT NULL,
    name text NOT NULL,
    format text NOT NULL,
    mode text NOT NULL,
    address text,
    login text,
    secret text,
    api_key_hash bytea,
    interval_seconds double precision DEFAULT 5 NOT NULL,
    event_code text NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    last_pulled_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    kept_day date,
    kept_day_bytes bigint DEFAULT 0 NOT NULL,
    CONSTRAINT provider_code_check CHECK ((code ~ '^[a-z0-9][a-z0-9_-]{1,39}$'::text)),
    CONSTRAINT provider_format_check CHECK ((format = 'odf'::text)),
    CONSTRAINT provider_interval_seconds_check CHECK ((interval_seconds > (0)::double precision)),
    CONSTRAINT provider_kept_day_bytes_check CHECK ((kept_day_bytes >= 0)),
    CONSTRAINT provider_mode_check CHECK ((mode = ANY (ARRAY['push'::text, 'pull'::text])))
);

--
-- Name: provider_message; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_message (
    id bigint NOT NULL,
    provider_code text NOT NULL,
    received_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    content_type text,
    body bytea NOT NULL,
    sha256 bytea NOT NULL,
    outcome text DEFAULT 'received'::text NOT NULL,
    reason text,
    unit_id uuid,
    actions integer DEFAULT 0 NOT NULL,
    CONSTRAINT provider_message_outcome_check CHECK ((outcome = ANY (ARRAY['received'::text, 'accepted'::text, 'duplicate'::text, 'refused'::text])))
);

--
-- Name: provider_message_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.provider_message ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.provider_message_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: review_item; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.review_item (
    id bigint NOT NULL,
    integration_id uuid NOT NULL,
    kind text NOT NULL,
    subject_key text NOT NULL,
    subject_id uuid,
    run_id uuid,
    question text NOT NULL,
    status text DEFAULT 'open'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    resolved_at timestamp with time zone,
    resolved_by text,
    CONSTRAINT review_item_kind_check CHECK ((kind = ANY (ARRAY['held'::text, 'guard'::text, 'missing'::text]))),
    CONSTRAINT review_item_status_check CHECK ((status = ANY (ARRAY['open'::text, 'done'::text, 'dismissed'::text])))
);

--
-- Name: review_item_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.review_item ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.review_item_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: schema_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: scorer_assignment; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.scorer_assignment (
    id bigint NOT NULL,
    account_id uuid NOT NULL,
    event_id uuid NOT NULL,
    unit_id uuid,
    venue text,
    day date,
    assigned_by text NOT NULL,
    assigned_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT scorer_assignment_check CHECK ((((unit_id IS NOT NULL) AND (venue IS NULL) AND (day IS NULL)) OR ((unit_id IS NULL) AND (venue IS NOT NULL) AND (day IS NOT NULL))))
);

--
-- Name: scorer_assignment_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.scorer_assignment ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.scorer_assignment_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: scorer_refusal; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.scorer_refusal (
    id bigint NOT NULL,
    client_id text NOT NULL,
    unit_id uuid,
    account_id uuid,
    actor_name text NOT NULL,
    screen text,
    kind text NOT NULL,
    reason text NOT NULL,
    refused_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: scorer_refusal_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.scorer_refusal ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.scorer_refusal_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: sign_in_throttle; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sign_in_throttle (
    key text NOT NULL,
    failures integer NOT NULL,
    window_ends timestamp with time zone NOT NULL
);

--
-- Name: timeline_item; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.timeline_item (
    id bigint NOT NULL,
    command_id text NOT NULL,
    code text NOT NULL,
    event_id uuid,
    subject_kind text NOT NULL,
    subject_id uuid,
    unit_ids uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    actor_kind text NOT NULL,
    actor_name text NOT NULL,
    source_code text,
    screen text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    diff jsonb DEFAULT '[]'::jsonb NOT NULL,
    seq bigint,
    occurred_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT timeline_item_actor_kind_check CHECK ((actor_kind = ANY (ARRAY['person'::text, 'integration'::text, 'scorer'::text, 'provider'::text, 'system'::text])))
);

--
-- Name: timeline_item_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.timeline_item ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.timeline_item_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: unit; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.unit (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    event_id uuid NOT NULL,
    discipline_id uuid NOT NULL,
    code text NOT NULL,
    name text NOT NULL,
    phase text DEFAULT ''::text NOT NULL,
    start_at timestamp with time zone,
    venue text,
    status text DEFAULT 'SCHEDULED'::text NOT NULL,
    pinned text[] DEFAULT '{}'::text[] NOT NULL,
    changed_seq bigint DEFAULT nextval('public.change_seq'::regclass) NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    match_state jsonb,
    match_seq integer DEFAULT 0 NOT NULL,
    CONSTRAINT unit_code_check CHECK ((code ~ '^[A-Z0-9-]{34}$'::text)),
    CONSTRAINT unit_match_seq_check CHECK ((match_seq >= 0)),
    CONSTRAINT unit_status_check CHECK ((status = ANY (ARRAY['SCHEDULED'::text, 'DELAYED'::text, 'GETTING_READY'::text, 'RUNNING'::text, 'INTERRUPTED'::text, 'UNOFFICIAL'::text, 'OFFICIAL'::text, 'PROTESTED'::text, 'POSTPONED'::text, 'RESCHEDULED'::text, 'CANCELLED'::text])))
);

--
-- Name: unit_competitor; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.unit_competitor (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    unit_id uuid NOT NULL,
    sort_order integer NOT NULL,
    competitor_id uuid,
    score text,
    result text,
    rank integer,
    medal text,
    pinned text[] DEFAULT '{}'::text[] NOT NULL,
    changed_seq bigint DEFAULT nextval('public.change_seq'::regclass) NOT NULL,
    CONSTRAINT unit_competitor_medal_check CHECK ((medal = ANY (ARRAY['GOLD'::text, 'SILVER'::text, 'BRONZE'::text]))),
    CONSTRAINT unit_competitor_rank_check CHECK ((rank >= 1)),
    CONSTRAINT unit_competitor_sort_order_check CHECK ((sort_order >= 1))
);

--
-- Name: account_change account_change_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.account_change
    ADD CONSTRAINT account_change_pkey PRIMARY KEY (id);

--
-- Name: account account_login_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.account
    ADD CONSTRAINT account_login_key UNIQUE (login);

--
-- Name: account account_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.account
    ADD CONSTRAINT account_pkey PRIMARY KEY (id);

--
-- Name: account_session account_session_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.account_session
    ADD CONSTRAINT account_session_pkey PRIMARY KEY (token_hash);

--
-- Name: alert alert_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.alert
    ADD CONSTRAINT alert_pkey PRIMARY KEY (id);

--
-- Name: api_key api_key_key_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_key
    ADD CONSTRAINT api_key_key_hash_key UNIQUE (key_hash);

--
-- Name: api_key api_key_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_key
    ADD CONSTRAINT api_key_name_key UNIQUE (name);

--
-- Name: api_key api_key_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_key
    ADD CONSTRAINT api_key_pkey PRIMARY KEY (id);

--
-- Name: client client_code_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.client
    ADD CONSTRAINT client_code_key UNIQUE (code);

--
-- Name: client_feed client_feed_client_id_kind_format_discipline_id_top_n_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.client_feed
    ADD CONSTRAINT client_feed_client_id_kind_format_discipline_id_top_n_key UNIQUE NULLS NOT DISTINCT (client_id, kind, format, discipline_id, top_n);

--
-- Name: client_feed client_feed_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.client_feed
    ADD CONSTRAINT client_feed_pkey PRIMARY KEY (id);

--
-- Name: client client_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.client
    ADD CONSTRAINT client_pkey PRIMARY KEY (id);

--
-- Name: command command_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command
    ADD CONSTRAINT command_pkey PRIMARY KEY (command_id);

--
-- Name: competitor competitor_event_id_code_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.competitor
    ADD CONSTRAINT competitor_event_id_code_key UNIQUE (event_id, code);

--
-- Name: competitor competitor_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.competitor
    ADD CONSTRAINT competitor_pkey PRIMARY KEY (id);

--
-- Name: delivery_alert delivery_alert_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_alert
    ADD CONSTRAINT delivery_alert_pkey PRIMARY KEY (id);

--
-- Name: delivery_attempt delivery_attempt_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_attempt
    ADD CONSTRAINT delivery_attempt_pkey PRIMARY KEY (id);

--
-- Name: delivery_cursor delivery_cursor_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_cursor
    ADD CONSTRAINT delivery_cursor_pkey PRIMARY KEY (name);

--
-- Name: discipline discipline_event_id_code_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.discipline
    ADD CONSTRAINT discipline_event_id_code_key UNIQUE (event_id, code);

--
-- Name: discipline discipline_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.discipline
    ADD CONSTRAINT discipline_pkey PRIMARY KEY (id);

--
-- Name: domain_event domain_event_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.domain_event
    ADD CONSTRAINT domain_event_pkey PRIMARY KEY (id);

--
-- Name: entry entry_discipline_id_event_name_competitor_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entry
    ADD CONSTRAINT entry_discipline_id_event_name_competitor_id_key UNIQUE (discipline_id, event_name, competitor_id);

--
-- Name: entry entry_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entry
    ADD CONSTRAINT entry_pkey PRIMARY KEY (id);

--
-- Name: event event_code_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event
    ADD CONSTRAINT event_code_key UNIQUE (code);

--
-- Name: event event_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event
    ADD CONSTRAINT event_pkey PRIMARY KEY (id);

--
-- Name: integration integration_code_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration
    ADD CONSTRAINT integration_code_key UNIQUE (code);

--
-- Name: integration_job integration_job_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_job
    ADD CONSTRAINT integration_job_pkey PRIMARY KEY (id);

--
-- Name: integration_key_state integration_key_state_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_key_state
    ADD CONSTRAINT integration_key_state_pkey PRIMARY KEY (integration_id, subject_key);

--
-- Name: integration_lookup integration_lookup_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_lookup
    ADD CONSTRAINT integration_lookup_pkey PRIMARY KEY (integration_id, kind, external_id);

--
-- Name: integration integration_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration
    ADD CONSTRAINT integration_pkey PRIMARY KEY (id);

--
-- Name: integration_row integration_row_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_row
    ADD CONSTRAINT integration_row_pkey PRIMARY KEY (id);

--
-- Name: integration_run integration_run_integration_id_scout_run_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_run
    ADD CONSTRAINT integration_run_integration_id_scout_run_id_key UNIQUE (integration_id, scout_run_id);

--
-- Name: integration_run integration_run_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_run
    ADD CONSTRAINT integration_run_pkey PRIMARY KEY (id);

--
-- Name: integration_version integration_version_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_version
    ADD CONSTRAINT integration_version_pkey PRIMARY KEY (integration_id, version);

--
-- Name: match_action match_action_command_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.match_action
    ADD CONSTRAINT match_action_command_id_key UNIQUE (command_id);

--
-- Name: match_action match_action_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.match_action
    ADD CONSTRAINT match_action_pkey PRIMARY KEY (unit_id, seq);

--
-- Name: medal_row medal_row_event_id_discipline_id_noc_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.medal_row
    ADD CONSTRAINT medal_row_event_id_discipline_id_noc_key UNIQUE NULLS NOT DISTINCT (event_id, discipline_id, noc);

--
-- Name: medal_row medal_row_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.medal_row
    ADD CONSTRAINT medal_row_pkey PRIMARY KEY (id);

--
-- Name: provider_message provider_message_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_message
    ADD CONSTRAINT provider_message_pkey PRIMARY KEY (id);

--
-- Name: provider provider_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider
    ADD CONSTRAINT provider_pkey PRIMARY KEY (code);

--
-- Name: review_item review_item_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.review_item
    ADD CONSTRAINT review_item_pkey PRIMARY KEY (id);

--
-- Name: schema_version schema_version_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_version
    ADD CONSTRAINT schema_version_pkey PRIMARY KEY (version);

--
-- Name: scorer_assignment scorer_assignment_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_assignment
    ADD CONSTRAINT scorer_assignment_pkey PRIMARY KEY (id);

--
-- Name: scorer_refusal scorer_refusal_client_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_refusal
    ADD CONSTRAINT scorer_refusal_client_id_key UNIQUE (client_id);

--
-- Name: scorer_refusal scorer_refusal_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_refusal
    ADD CONSTRAINT scorer_refusal_pkey PRIMARY KEY (id);

--
-- Name: sign_in_throttle sign_in_throttle_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sign_in_throttle
    ADD CONSTRAINT sign_in_throttle_pkey PRIMARY KEY (key);

--
-- Name: timeline_item timeline_item_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.timeline_item
    ADD CONSTRAINT timeline_item_pkey PRIMARY KEY (id);

--
-- Name: unit_competitor unit_competitor_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit_competitor
    ADD CONSTRAINT unit_competitor_pkey PRIMARY KEY (id);

--
-- Name: unit_competitor unit_competitor_unit_id_sort_order_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit_competitor
    ADD CONSTRAINT unit_competitor_unit_id_sort_order_key UNIQUE (unit_id, sort_order);

--
-- Name: unit unit_event_id_code_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit
    ADD CONSTRAINT unit_event_id_code_key UNIQUE (event_id, code);

--
-- Name: unit unit_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit
    ADD CONSTRAINT unit_pkey PRIMARY KEY (id);

--
-- Name: account_change_by_login; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX account_change_by_login ON public.account_change USING btree (login, id DESC);

--
-- Name: account_session_account; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX account_session_account ON public.account_session USING btree (account_id);

--
-- Name: account_session_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX account_session_expires ON public.account_session USING btree (expires_at);

--
-- Name: alert_one_open; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX alert_one_open ON public.alert USING btree (integration_id, kind) WHERE (status = 'open'::text);

--
-- Name: client_feed_owed; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX client_feed_owed ON public.client_feed USING btree (client_id) WHERE (marks > built_marks);

--
-- Name: delivery_alert_one_open; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX delivery_alert_one_open ON public.delivery_alert USING btree (client_id, kind) WHERE (status = 'open'::text);

--
-- Name: delivery_attempt_by_client; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX delivery_attempt_by_client ON public.delivery_attempt USING btree (client_id, id DESC);

--
-- Name: delivery_attempt_by_client_finished; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX delivery_attempt_by_client_finished ON public.delivery_attempt USING btree (client_id, finished_at);

--
-- Name: delivery_attempt_by_feed; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX delivery_attempt_by_feed ON public.delivery_attempt USING btree (feed_id, id DESC);

--
-- Name: domain_event_approvals; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX domain_event_approvals ON public.domain_event USING btree (event_id, unit_id, id DESC) WHERE (kind = 'results.approved'::text);

--
-- Name: domain_event_by_saved_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX domain_event_by_saved_at ON public.domain_event USING btree (saved_at);

--
-- Name: domain_event_by_unit; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX domain_event_by_unit ON public.domain_event USING btree (unit_id, id) WHERE (unit_id IS NOT NULL);

--
-- Name: domain_event_unit_approvals; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX domain_event_unit_approvals ON public.domain_event USING btree (unit_id, id DESC) WHERE (kind = 'results.approved'::text);

--
-- Name: integration_job_one_open_check; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX integration_job_one_open_check ON public.integration_job USING btree (integration_id) WHERE ((kind = 'check'::text) AND (status = ANY (ARRAY['queued'::text, 'running'::text])));

--
-- Name: integration_job_one_pull_per_run; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX integration_job_one_pull_per_run ON public.integration_job USING btree (integration_id, scout_run_id) WHERE ((kind = 'pull'::text) AND (via = 'doorbell'::text));

--
-- Name: integration_job_one_running; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX integration_job_one_running ON public.integration_job USING btree (integration_id) WHERE (status = 'running'::text);

--
-- Name: integration_job_open; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX integration_job_open ON public.integration_job USING btree (status, created_at) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]));

--
-- Name: integration_row_by_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX integration_row_by_key ON public.integration_row USING btree (integration_id, subject_key, id DESC);

--
-- Name: integration_row_by_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX integration_row_by_run ON public.integration_row USING btree (run_id, "position");

--
-- Name: integration_run_applied; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX integration_run_applied ON public.integration_run USING btree (integration_id, scout_finished_at DESC) WHERE (status = ANY (ARRAY['done'::text, 'partly_done'::text]));

--
-- Name: integration_run_newest; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX integration_run_newest ON public.integration_run USING btree (integration_id, received_at DESC);

--
-- Name: ix_key_state_next_read; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_key_state_next_read ON public.integration_key_state USING btree (next_read_at) WHERE (next_read_at IS NOT NULL);

--
-- Name: medal_row_by_changed_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX medal_row_by_changed_seq ON public.medal_row USING btree (changed_seq);

--
-- Name: medal_row_by_updated_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX medal_row_by_updated_at ON public.medal_row USING btree (updated_at);

--
-- Name: provider_message_by_provider; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX provider_message_by_provider ON public.provider_message USING btree (provider_code, id DESC);

--
-- Name: review_item_one_open; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX review_item_one_open ON public.review_item USING btree (integration_id, kind, subject_key) WHERE (status = 'open'::text);

--
-- Name: scorer_assignment_by_account; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX scorer_assignment_by_account ON public.scorer_assignment USING btree (account_id);

--
-- Name: scorer_assignment_of_unit; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX scorer_assignment_of_unit ON public.scorer_assignment USING btree (unit_id, account_id) WHERE (unit_id IS NOT NULL);

--
-- Name: scorer_assignment_of_venue_day; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX scorer_assignment_of_venue_day ON public.scorer_assignment USING btree (event_id, venue, day, account_id) WHERE (unit_id IS NULL);

--
-- Name: scorer_refusal_by_unit; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX scorer_refusal_by_unit ON public.scorer_refusal USING btree (unit_id, id DESC);

--
-- Name: sign_in_throttle_window_ends; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sign_in_throttle_window_ends ON public.sign_in_throttle USING btree (window_ends);

--
-- Name: timeline_by_event; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX timeline_by_event ON public.timeline_item USING btree (event_id, id DESC);

--
-- Name: timeline_by_subject; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX timeline_by_subject ON public.timeline_item USING btree (subject_kind, subject_id, id DESC);

--
-- Name: timeline_by_unit; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX timeline_by_unit ON public.timeline_item USING gin (unit_ids);

--
-- Name: unit_by_changed_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX unit_by_changed_seq ON public.unit USING btree (changed_seq);

--
-- Name: unit_by_start; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX unit_by_start ON public.unit USING btree (event_id, start_at);

--
-- Name: unit_by_updated_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX unit_by_updated_at ON public.unit USING btree (updated_at);

--
-- Name: account account_role_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER account_role_changed AFTER UPDATE OF role, disabled ON public.account FOR EACH STATEMENT EXECUTE FUNCTION public.notify_scorer_assignment();

--
-- Name: client client_checker_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER client_checker_changed AFTER INSERT OR DELETE OR UPDATE ON public.client FOR EACH ROW EXECUTE FUNCTION public.client_checker_changed();

--
-- Name: domain_event domain_event_notify; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER domain_event_notify AFTER INSERT ON public.domain_event REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.domain_event_notify();

--
-- Name: scorer_assignment scorer_assignment_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER scorer_assignment_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.scorer_assignment FOR EACH STATEMENT EXECUTE FUNCTION public.notify_scorer_assignment();

--
-- Name: account_session account_session_account_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.account_session
    ADD CONSTRAINT account_session_account_id_fkey FOREIGN KEY (account_id) REFERENCES public.account(id) ON DELETE CASCADE;

--
-- Name: alert alert_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.alert
    ADD CONSTRAINT alert_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: alert alert_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.alert
    ADD CONSTRAINT alert_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.integration_run(id) ON DELETE SET NULL;

--
-- Name: client client_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.client
    ADD CONSTRAINT client_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: client_feed client_feed_client_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.client_feed
    ADD CONSTRAINT client_feed_client_id_fkey FOREIGN KEY (client_id) REFERENCES public.client(id) ON DELETE CASCADE;

--
-- Name: client_feed client_feed_discipline_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.client_feed
    ADD CONSTRAINT client_feed_discipline_id_fkey FOREIGN KEY (discipline_id) REFERENCES public.discipline(id) ON DELETE CASCADE;

--
-- Name: competitor competitor_discipline_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.competitor
    ADD CONSTRAINT competitor_discipline_id_fkey FOREIGN KEY (discipline_id) REFERENCES public.discipline(id) ON DELETE CASCADE;

--
-- Name: competitor competitor_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.competitor
    ADD CONSTRAINT competitor_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: delivery_alert delivery_alert_client_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_alert
    ADD CONSTRAINT delivery_alert_client_id_fkey FOREIGN KEY (client_id) REFERENCES public.client(id) ON DELETE CASCADE;

--
-- Name: delivery_attempt delivery_attempt_client_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_attempt
    ADD CONSTRAINT delivery_attempt_client_id_fkey FOREIGN KEY (client_id) REFERENCES public.client(id) ON DELETE CASCADE;

--
-- Name: delivery_attempt delivery_attempt_feed_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_attempt
    ADD CONSTRAINT delivery_attempt_feed_id_fkey FOREIGN KEY (feed_id) REFERENCES public.client_feed(id) ON DELETE CASCADE;

--
-- Name: discipline discipline_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.discipline
    ADD CONSTRAINT discipline_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: domain_event domain_event_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.domain_event
    ADD CONSTRAINT domain_event_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: entry entry_competitor_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entry
    ADD CONSTRAINT entry_competitor_id_fkey FOREIGN KEY (competitor_id) REFERENCES public.competitor(id) ON DELETE CASCADE;

--
-- Name: entry entry_discipline_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entry
    ADD CONSTRAINT entry_discipline_id_fkey FOREIGN KEY (discipline_id) REFERENCES public.discipline(id) ON DELETE CASCADE;

--
-- Name: entry entry_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.entry
    ADD CONSTRAINT entry_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: integration integration_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration
    ADD CONSTRAINT integration_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: integration_job integration_job_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_job
    ADD CONSTRAINT integration_job_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: integration_job integration_job_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_job
    ADD CONSTRAINT integration_job_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.integration_run(id) ON DELETE SET NULL;

--
-- Name: integration_key_state integration_key_state_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_key_state
    ADD CONSTRAINT integration_key_state_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: integration_lookup integration_lookup_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_lookup
    ADD CONSTRAINT integration_lookup_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: integration_row integration_row_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_row
    ADD CONSTRAINT integration_row_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: integration_row integration_row_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_row
    ADD CONSTRAINT integration_row_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.integration_run(id) ON DELETE CASCADE;

--
-- Name: integration_run integration_run_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_run
    ADD CONSTRAINT integration_run_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: integration_version integration_version_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.integration_version
    ADD CONSTRAINT integration_version_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: match_action match_action_unit_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.match_action
    ADD CONSTRAINT match_action_unit_id_fkey FOREIGN KEY (unit_id) REFERENCES public.unit(id) ON DELETE CASCADE;

--
-- Name: medal_row medal_row_discipline_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.medal_row
    ADD CONSTRAINT medal_row_discipline_id_fkey FOREIGN KEY (discipline_id) REFERENCES public.discipline(id) ON DELETE CASCADE;

--
-- Name: medal_row medal_row_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.medal_row
    ADD CONSTRAINT medal_row_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: provider_message provider_message_provider_code_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_message
    ADD CONSTRAINT provider_message_provider_code_fkey FOREIGN KEY (provider_code) REFERENCES public.provider(code) ON DELETE CASCADE;

--
-- Name: provider_message provider_message_unit_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_message
    ADD CONSTRAINT provider_message_unit_id_fkey FOREIGN KEY (unit_id) REFERENCES public.unit(id) ON DELETE SET NULL;

--
-- Name: review_item review_item_integration_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.review_item
    ADD CONSTRAINT review_item_integration_id_fkey FOREIGN KEY (integration_id) REFERENCES public.integration(id) ON DELETE CASCADE;

--
-- Name: review_item review_item_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.review_item
    ADD CONSTRAINT review_item_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.integration_run(id) ON DELETE SET NULL;

--
-- Name: scorer_assignment scorer_assignment_account_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_assignment
    ADD CONSTRAINT scorer_assignment_account_id_fkey FOREIGN KEY (account_id) REFERENCES public.account(id) ON DELETE CASCADE;

--
-- Name: scorer_assignment scorer_assignment_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_assignment
    ADD CONSTRAINT scorer_assignment_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: scorer_assignment scorer_assignment_unit_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_assignment
    ADD CONSTRAINT scorer_assignment_unit_id_fkey FOREIGN KEY (unit_id) REFERENCES public.unit(id) ON DELETE CASCADE;

--
-- Name: scorer_refusal scorer_refusal_account_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_refusal
    ADD CONSTRAINT scorer_refusal_account_id_fkey FOREIGN KEY (account_id) REFERENCES public.account(id) ON DELETE SET NULL;

--
-- Name: scorer_refusal scorer_refusal_unit_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.scorer_refusal
    ADD CONSTRAINT scorer_refusal_unit_id_fkey FOREIGN KEY (unit_id) REFERENCES public.unit(id) ON DELETE CASCADE;

--
-- Name: timeline_item timeline_item_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.timeline_item
    ADD CONSTRAINT timeline_item_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- Name: unit_competitor unit_competitor_competitor_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit_competitor
    ADD CONSTRAINT unit_competitor_competitor_id_fkey FOREIGN KEY (competitor_id) REFERENCES public.competitor(id);

--
-- Name: unit_competitor unit_competitor_unit_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit_competitor
    ADD CONSTRAINT unit_competitor_unit_id_fkey FOREIGN KEY (unit_id) REFERENCES public.unit(id) ON DELETE CASCADE;

--
-- Name: unit unit_discipline_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit
    ADD CONSTRAINT unit_discipline_id_fkey FOREIGN KEY (discipline_id) REFERENCES public.discipline(id) ON DELETE CASCADE;

--
-- Name: unit unit_event_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.unit
    ADD CONSTRAINT unit_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.event(id) ON DELETE CASCADE;

--
-- PostgreSQL database dump complete
--
