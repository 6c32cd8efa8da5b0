"""The settings object: every number from the design documents is a field with that default."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from omnium_settings._errors import SettingsError
from omnium_settings._parse import parse_value

PREFIX = "OMNIUM_"


def _setting(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True, slots=True)
class Settings:
    """One process's settings. Build it once with `Settings.from_env()` and pass it down."""

    # -- Servers ---------------------------------------------------------------------------
    database_url: str | None = _setting(
        None, "PostgreSQL to use. Unset: the dev stack starts a private one."
    )
    redis_url: str | None = _setting(
        None, "Redis to use. Unset: the dev stack starts a private one."
    )
    bind_host: str = _setting("127.0.0.1", "Address every server listens on.")
    log_level: str = _setting("INFO", "Python log level.")
    http_grace_seconds: float = _setting(
        10.0, "On SIGTERM, time the doorbell's and the console's requests in flight get."
    )

    # -- Ports (DESIGN §11) ----------------------------------------------------------------
    gateway_port: int = _setting(8080, "Public API gateway (HTTP).")
    doorbell_port: int = _setting(8081, "Imports: Scout's doorbell (HTTP).")
    admin_port: int = _setting(8082, "Operators' console (HTTP).")
    scout_simulator_port: int = _setting(8090, "Scout simulator (HTTP, dev and tests).")
    command_port: int = _setting(50051, "Command service (gRPC).")
    scoring_port: int = _setting(50052, "Scoring service (gRPC).")
    imports_port: int = _setting(50053, "Imports service (gRPC).")
    delivery_port: int = _setting(50054, "Delivery service (gRPC).")
    command_address: str = _setting(
        "127.0.0.1:50051",
        "Where other services reach command: host:port, IP:port copies or dns:///name:port.",
    )
    imports_address: str = _setting(
        "127.0.0.1:50053",
        "Where other services reach imports: host:port, IP:port copies or dns:///name:port.",
    )
    delivery_address: str = _setting(
        "127.0.0.1:50054",
        "Where the console reaches delivery: host:port, IP:port copies or dns:///name:port.",
    )

    # -- Metrics (Prometheus text at /metrics; 0: not served) --------------------------------
    gateway_metrics_port: int = _setting(9080, "Gateway: /metrics, every worker summed.")
    imports_metrics_port: int = _setting(9081, "Imports (doorbell and queue): /metrics.")
    admin_metrics_port: int = _setting(9082, "Operators' console: /metrics.")
    command_metrics_port: int = _setting(9051, "Command service: /metrics.")
    scoring_metrics_port: int = _setting(9052, "Scoring service: /metrics.")
    delivery_metrics_port: int = _setting(9054, "Delivery service: /metrics.")
    metrics_sample_seconds: float = _setting(
        5.0, "How often gauges that take a query (queue depth and age, outbox lag) are read."
    )
    gateway_metrics_dir: str = _setting(
        "", "Folder the gateway's workers keep their metrics files in; empty: a new temporary one."
    )

    # -- gRPC ------------------------------------------------------------------------------
    grpc_auth_required: bool = _setting(True, "Callers must send a bearer token.")
    grpc_callers: tuple[str, ...] = _setting(
        (),
        "Who may call a gRPC server: name:role:token items (comma list). List a caller twice, "
        "with its old and new token, to rotate it. Roles: docs/callers.md.",
    )
    grpc_tokens: tuple[str, ...] = _setting(
        (),
        "No longer read: tokens now belong to named callers (OMNIUM_GRPC_CALLERS). Set, the "
        "process stops at start-up and says what to write instead.",
    )
    grpc_token: str | None = _setting(
        None, "Bearer token this process sends to other services: its own caller's token."
    )
    grpc_max_message_bytes: int = _setting(4 * 1024 * 1024, "Largest gRPC message, each way.")
    grpc_grace_seconds: float = _setting(10.0, "On SIGTERM, time given to calls in flight.")
    grpc_deadline_seconds: float = _setting(10.0, "Deadline on calls to another service.")
    grpc_reconnect_max_seconds: float = _setting(
        1.0, "Longest wait before a channel tries a copy that was gone again."
    )
    grpc_retry_attempts: int = _setting(
        3, "Tries of an idempotent call when a copy is gone or stopping (1: none; at most 5)."
    )
    grpc_retry_first_backoff_seconds: float = _setting(
        0.1, "Longest wait before the first try again (gRPC waits a random part of it)."
    )
    grpc_retry_max_backoff_seconds: float = _setting(
        1.0, "Longest wait before any later try; the call's deadline bounds all tries."
    )
    grpc_retry_backoff_multiplier: float = _setting(
        2.0, "Each try's longest wait is the one before times this."
    )
    grpc_tls_cert_file: str | None = _setting(
        None,
        "PEM certificate; set with the key for TLS. The server serves it; with client auth, "
        "this process's channels present it too.",
    )
    grpc_tls_key_file: str | None = _setting(None, "PEM private key for TLS.")
    grpc_tls_ca_file: str | None = _setting(
        None,
        "PEM CA bundle. Set, every gRPC channel this process opens uses TLS and trusts only "
        "these; with client auth, the server takes only callers whose certificate they signed.",
    )
    grpc_tls_client_auth: bool = _setting(
        False,
        "Mutual TLS: the server refuses callers without a certificate from "
        "OMNIUM_GRPC_TLS_CA_FILE, and channels present OMNIUM_GRPC_TLS_CERT_FILE.",
    )
    grpc_tls_server_name: str | None = _setting(
        None,
        "The name channels expect in a server's certificate, when the address is not that "
        "name (an IP address, say). Unset: the address's host.",
    )

    # -- Database roads (DESIGN §4) --------------------------------------------------------
    people_pool_size: int = _setting(10, "Connections for people's and scorers' commands.")
    people_transaction_seconds: float = _setting(10.0, "Longest a person's command may take.")
    import_pool_size: int = _setting(4, "Connections for import batches.")
    import_lock_timeout_seconds: float = _setting(5.0, "Import batch: longest wait for a lock.")
    import_statement_timeout_seconds: float = _setting(30.0, "Import batch: longest statement.")
    import_idle_seconds: float = _setting(30.0, "Import batch: longest idle in a transaction.")
    batch_max_units: int = _setting(25, "Most units (matches) in one import batch.")
    reader_pool_size: int = _setting(10, "Connections for reads (timeline, public API).")
    database_connect_timeout_seconds: float = _setting(
        2.0, "Pools and LISTENs: longest wait for one host of the DSN before the next is tried."
    )
    listen_retry_first_seconds: float = _setting(
        0.1, "LISTEN connection lost: first wait before connecting again (then doubled)."
    )
    # Short, so every listener is back within about a second of the primary answering (the
    # failover drill's restart_listeners_back_s): one connect a try per process is cheap.
    listen_retry_max_seconds: float = _setting(
        0.5, "LISTEN connection lost: longest wait between tries to connect again."
    )
    listen_probe_seconds: float = _setting(
        5.0, "LISTEN connections are probed this often: a lost machine may never close one."
    )
    listen_probe_timeout_seconds: float = _setting(
        2.0, "A LISTEN connection's probe unanswered this long counts as a lost connection."
    )

    # -- Telemetry -------------------------------------------------------------------------
    telemetry_exporter: Literal["none", "console", "otlp"] = _setting(
        "none", "Where traces go: none, console or otlp."
    )
    otlp_endpoint: str = _setting("http://127.0.0.1:4317", "OTLP/gRPC collector for traces.")
    telemetry_sample_ratio: float = _setting(
        1.0,
        "Share of new traces kept, 0 to 1 (0.01: one in a hundred). A trace is started at a "
        "request or a ring, and every hop after follows the first one's choice.",
    )

    # -- Imports (Section 3 seed) ----------------------------------------------------------
    imports_nice: int = _setting(10, "CPU priority step of the imports process.")
    doorbell_max_bytes: int = _setting(1024 * 1024, "Largest doorbell body.")
    doorbell_database_timeout_seconds: float = _setting(
        5.0, "Doorbell: longest wait for PostgreSQL before answering 503 (nothing queued)."
    )
    doorbell_retry_after_seconds: int = _setting(
        5, "Doorbell: Retry-After sent with a 503 when the ring could not be queued."
    )
    scheduler_seconds: float = _setting(
        60.0, "How often the scheduler looks for quiet integrations."
    )
    check_seconds: int = _setting(
        600, "Default: check an integration not heard from for this long."
    )
    lease_renew_seconds: float = _setting(10.0, "A running import job renews its lease this often.")
    imports_workers: int = _setting(2, "Import jobs one imports process runs at once.")
    fastpath_lag_seconds: float = _setting(
        1.0, "Fast path: extra seconds re-read before the oldest transaction open at a look."
    )
    fastpath_blind_seconds: float = _setting(
        60.0, "Fast path: window re-read when other sessions are hidden (no pg_read_all_stats)."
    )
    imports_poll_seconds: float = _setting(5.0, "Queue poll when no NOTIFY arrives.")
    lease_expire_seconds: float = _setting(60.0, "A job not renewed for this long is freed.")
    imports_stop_grace_seconds: float = _setting(
        5.0, "On SIGTERM, time the batches in flight get before the jobs go back to the queue."
    )
    scout_page_size: int = _setting(500, "Rows per page read from Scout.")
    scout_max_rows: int = _setting(50_000, "Most rows in one Scout run.")
    scout_timeout_seconds: float = _setting(20.0, "Scout HTTP timeout.")
    scout_connect_timeout_seconds: float = _setting(8.0, "Scout HTTP connect timeout.")
    scout_tries: int = _setting(3, "Tries per Scout call, with growing waits.")
    scout_retry_base_seconds: float = _setting(1.0, "First wait between Scout tries; doubles.")
    guard_min_share: float = _setting(0.5, "A run with fewer rows than this share of usual pauses.")
    guard_usual_runs: int = _setting(
        5, "Written runs that passed the size check by themselves: their median is 'usual'."
    )
    guard_max_not_placed: float = _setting(0.1, "Share of rows not placed or held that pauses.")
    guard_max_refused: float = _setting(0.1, "Share of rows refused that pauses a run.")
    guard_max_cleared: int = _setting(10, "Most records one run may clear before it pauses.")
    guard_max_reopened: int = _setting(
        5, "Most finished units one run may reopen before it pauses."
    )
    missing_runs_to_review: int = _setting(2, "Full runs a key may be missing before review.")
    auto_cancel_missing: bool = _setting(False, "Cancel missing units by itself (off: a person).")
    settle_first_hours: float = _setting(1.0, "Settle window: first read after official.")
    settle_hourly_until_hours: float = _setting(6.0, "Settle window: hourly reads until then.")
    settle_six_hourly_until_hours: float = _setting(24.0, "Then every 6 h until then.")
    settle_until_hours: float = _setting(72.0, "Then daily until then.")
    settle_hourly_step_hours: float = _setting(1.0, "Settle window: the 'hourly' step.")
    settle_six_hourly_step_hours: float = _setting(6.0, "Settle window: the 'every 6 h' step.")
    settle_daily_step_hours: float = _setting(24.0, "Settle window: the 'daily' step.")
    followup_keys_per_run: int = _setting(250, "Most keys in one Scout page run.")
    followup_seconds: float = _setting(
        60.0, "How often imports asks Scout for page runs of the keys due in their settle window."
    )
    followup_asked_wait_seconds: float = _setting(
        900.0,
        "A key asked for in a page run is asked for again after this if no page run has read it "
        "(Scout's 900 s run limit).",
    )
    alert_scout_failed_in_row: int = _setting(2, "Scout runs failed in a row before an alert.")
    batch_retry_seconds: float = _setting(
        90.0, "One batch is tried again this long (a failover) before the run is partly done."
    )
    batch_retry_first_seconds: float = _setting(
        0.5, "First wait before a batch is tried again; doubles each time."
    )
    batch_retry_max_seconds: float = _setting(10.0, "Longest wait between two tries of a batch.")
    resume_first_seconds: float = _setting(
        60.0, "A partly done run resumes by itself after this wait; doubles each time."
    )
    resume_max_seconds: float = _setting(900.0, "Longest wait before a partly done run resumes.")
    resume_tries: int = _setting(
        6, "Times a partly done run resumes by itself before it waits for a person."
    )
    imports_database_retry_seconds: float = _setting(
        60.0, "Imports' own reads and writes of a run are tried again this long (a failover)."
    )
    imports_database_retry_first_seconds: float = _setting(
        0.2, "First wait before imports' own read or write is tried again; doubles."
    )
    imports_database_retry_max_seconds: float = _setting(
        5.0, "Longest wait between two tries of imports' own read or write."
    )
    import_batches_in_flight: int = _setting(4, "Batches of one run sent at once.")
    alert_quiet_intervals: int = _setting(3, "Intervals without a new run before an alert.")
    row_log_days: int = _setting(30, "Days the import row log is kept.")
    database_standby_expected: bool = _setting(
        False, "Command alerts while the database has no synchronous standby (HA: true)."
    )
    standby_check_seconds: float = _setting(30.0, "How often command asks for the standby.")
    alert_webhook_url: str | None = _setting(None, "Where new alerts are POSTed as JSON.")
    alert_webhook_timeout_seconds: float = _setting(
        5.0, "Longest wait for the alert webhook to answer."
    )

    # -- Delivery (Section 1 seed) ---------------------------------------------------------
    delivery_nice: int = _setting(5, "CPU priority step of the delivery process.")
    delivery_log_days: int = _setting(
        30, "Days the send log is kept (each feed's newest send is always kept)."
    )
    feed_debounce_seconds: float = _setting(1.0, "A burst of writes: one feed rebuild per window.")
    live_debounce_seconds: float = _setting(0.25, "Window for live results feeds.")
    feed_rebuild_seconds: float = _setting(60.0, "Sweep: rebuild feeds behind their data.")
    delivery_poll_seconds: float = _setting(5.0, "Outbox poll when no NOTIFY arrives.")
    push_target_seconds: float = _setting(2.0, "Target: API and push within this, 95 in 100.")
    sftp_target_seconds: float = _setting(10.0, "Target: SFTP files within this, 95 in 100.")
    delivery_promise_share: float = _setting(
        0.95, "Share of a client's changes within its target below which it is alerted."
    )
    delivery_promise_window_seconds: float = _setting(
        900.0, "The sliding window the share within target is measured over."
    )
    delivery_promise_check_seconds: float = _setting(
        15.0, "How often each client's share within target is measured (and alerted)."
    )
    delivery_outbox_lag_seconds: float = _setting(
        10.0, "Outbox rows saved this recently are read again, for late commits."
    )
    delivery_lease_seconds: float = _setting(
        60.0, "A delivery copy holds a client this long; renewed while it sends."
    )
    delivery_clients_at_once: int = _setting(16, "Clients one delivery process sends to at once.")
    delivery_stop_grace_seconds: float = _setting(
        10.0, "On SIGTERM, time a send in flight gets to finish; cut after it, it is sent again."
    )
    delivery_retry_seconds: float = _setting(
        30.0, "After a send failed every try, try that feed again after this."
    )
    delivery_clients_file: str | None = _setting(
        None, "JSON file of clients and feeds loaded at start (see services/delivery/README.md)."
    )
    checker_disciplines: tuple[str, ...] = _setting(
        (),
        "Disciplines whose results wait for a person's approval (comma list): in every "
        "client's files, the public API and live push.",
    )
    sftp_tries: int = _setting(5, "Tries of one SFTP upload, with growing waits.")
    sftp_retry_base_seconds: float = _setting(0.5, "First wait between SFTP tries; doubles.")
    sftp_connect_timeout_seconds: float = _setting(5.0, "SFTP connect and sign-in timeout.")
    sftp_timeout_seconds: float = _setting(15.0, "Longest one SFTP upload may take.")
    webhook_tries: int = _setting(5, "Tries of one webhook, with growing waits.")
    webhook_retry_base_seconds: float = _setting(0.5, "First wait between webhook tries; doubles.")
    webhook_timeout_seconds: float = _setting(5.0, "Webhook HTTP timeout.")
    live_stream_length: int = _setting(
        1000, "Live push: events kept per Games for Last-Event-ID resume."
    )
    live_heartbeat_seconds: float = _setting(15.0, "Live push: SSE comment sent when quiet.")
    live_read_grace_seconds: float = _setting(
        5.0, "Live push: a stream read may take this long past its heartbeat before Redis is down."
    )
    live_retry_seconds: float = _setting(
        1.0, "Live push: after Redis failed, seconds before it is tried again."
    )
    live_backlog_length: int = _setting(
        10_000, "Live push: changes per Games delivery holds while Redis is down; then a gap."
    )
    live_max_streams: int = _setting(
        5000,
        "Live push: most SSE streams one gateway worker serves; past it, 503 with Retry-After "
        "(the worker's CPU, not Redis, is the limit).",
    )
    live_listener_queue: int = _setting(
        500,
        "Live push: events waiting for one listener before it is too slow: sent a gap and "
        "closed (it resumes with Last-Event-ID).",
    )
    live_stream_max_seconds: float = _setting(
        0.0,
        "Live push: a stream ends after this long with a retry hint, and the client reconnects "
        "with Last-Event-ID, missing nothing (0: never). Lets streams spread again over the "
        "copies after a restart; keep it above a proxy's idle cut.",
    )
    live_redis_connections: int = _setting(
        20,
        "Live push: Redis connections per gateway worker: 4 for replays, one per Games being "
        "read (a stream on one more Games is refused with 503 and Retry-After).",
    )
    sftp_sink_port: int = _setting(8022, "Dev stack: the local SFTP server clients' files go to.")
    webhook_sink_port: int = _setting(8092, "Dev stack: the local webhook receiver.")

    # -- Public API cache (Section 1 seed) -------------------------------------------------
    cache_ttl_live: int = _setting(3, "Cache seconds: live units.")
    cache_ttl_scheduled: int = _setting(60, "Cache seconds: scheduled units.")
    cache_ttl_final: int = _setting(21_600, "Cache seconds: finished results.")
    cache_ttl_reference: int = _setting(3_600, "Cache seconds: reference data.")
    cache_ttl_leaderboard: int = _setting(60, "Cache seconds: medal tables and leaderboards.")
    cache_ttl_negative: int = _setting(45, "Cache seconds: not found.")
    cache_stale_window: int = _setting(30, "Seconds a stale copy is served while one refresh runs.")
    cache_stale_if_error_seconds: int = _setting(
        86_400, "Seconds a cached copy is still served when PostgreSQL cannot answer."
    )
    gateway_workers: int = _setting(2, "Gateway worker processes sharing the port (SO_REUSEPORT).")
    gateway_stop_grace_seconds: float = _setting(
        10.0, "On SIGTERM, longest a gateway worker takes to stop; live streams end at once."
    )
    gateway_scorer_pool_size: int = _setting(
        4, "Connections per gateway worker for scorers' sign-in and sessions."
    )
    gateway_local_max_entries: int = _setting(
        50_000, "Most responses one gateway worker keeps in its own memory."
    )
    gateway_local_seconds_without_redis: float = _setting(
        1.0, "While Redis is down, seconds a worker reuses a response it read itself."
    )
    gateway_redis_timeout_seconds: float = _setting(
        1.0, "Gateway: longest wait for one Redis call before reading PostgreSQL instead."
    )
    gateway_redis_connections: int = _setting(
        50, "Gateway: Redis connections per worker; more calls wait their turn."
    )
    gateway_redis_failures_to_trip: int = _setting(
        3, "Gateway: failed Redis calls in a row before Redis counts as down for a while."
    )
    gateway_redis_retry_seconds: float = _setting(
        1.0, "Gateway: after a Redis failure, seconds before Redis is tried again."
    )
    gateway_fill_lock_seconds: float = _setting(
        5.0, "Longest one database read may hold a key's lock before another copy reads."
    )
    gateway_refresh_recheck_seconds: float = _setting(
        0.1, "A stale key another copy is refreshing is looked at again after this long."
    )
    gateway_database_timeout_seconds: float = _setting(
        5.0, "Gateway: longest database read before the answer is 503 (or a stale copy)."
    )
    gateway_outbox_poll_seconds: float = _setting(
        1.0, "Gateway: outbox read when no NOTIFY arrives (invalidations)."
    )
    gateway_anonymous_reads: bool = _setting(True, "Reads without X-API-Key are allowed.")
    gateway_anonymous_rate_per_second: float = _setting(
        20.0, "Requests per second per address without a key (token bucket refill)."
    )
    gateway_anonymous_burst: int = _setting(100, "Token bucket size per address without a key.")
    gateway_key_rate_per_second: float = _setting(
        100.0, "Default requests per second per API key (token bucket refill)."
    )
    gateway_key_burst: int = _setting(500, "Default token bucket size per API key.")
    gateway_api_keys: tuple[str, ...] = _setting(
        (), "Client keys, comma list of name:key[:rate_per_second[:burst]]."
    )
    gateway_keys_reload_seconds: float = _setting(
        10.0, "Gateway: how often each worker reads the API keys admins made on the console."
    )
    gateway_redis_prefix: str = _setting(
        "omnium:gw:", "Start of every Redis key and channel the gateway uses."
    )
    gateway_rate_lease_share: float = _setting(
        0.05, "Share of a bucket one worker takes from Redis at once (fewer Redis calls)."
    )
    gateway_purge_urls: tuple[str, ...] = _setting(
        (),
        "Shared caches (Varnish) the outbox relay sends PURGE with xkey-purge to (comma list).",
    )
    gateway_purge_timeout_seconds: float = _setting(
        2.0, "Gateway: longest wait for one shared-cache purge before it is tried again."
    )
    gateway_purge_repeat_seconds: float = _setting(
        2.0, "Gateway: a purge is sent again this long after, past any worker's late drop."
    )

    # -- Scoring (Section 1 seed) ----------------------------------------------------------
    scoring_nice: int = _setting(0, "CPU priority step of the scoring process.")
    scorer_sign_in_required: bool = _setting(True, "Scorers must sign in.")
    scorer_assignment_required: bool = _setting(
        True,
        "A scorer account scores only the matches assigned to it (by match, or by venue and "
        "day); operators and admins score any. Off, for a small event: every scorer scores any.",
    )
    scoring_address: str = _setting(
        "127.0.0.1:50052",
        "Where the gateway reaches scoring: host:port, IP:port copies or dns:///name:port.",
    )
    scoring_sports_dir: str = _setting("", "Folder of sport files; empty: the repo's sports/.")
    scoring_providers_dir: str = _setting(
        "", "Folder of provider files; empty: the repo's providers/."
    )
    scoring_attempts: int = _setting(5, "Times an action is re-checked when the match moved on.")
    scoring_finished_status: str = _setting(
        "UNOFFICIAL", "Unit status when the sport's rules say the match is finished."
    )
    scoring_match_cache_seconds: float = _setting(
        30.0,
        "Scoring checks the next action against the match as it last saw it for this long "
        "(the road still checks match_seq); 0: read every action's match from PostgreSQL.",
    )
    scoring_recent_actions: int = _setting(20, "Latest actions the console lists.")
    scoring_sync_max_actions: int = _setting(500, "Most queued actions in one Sync.")
    scoring_watch_poll_seconds: float = _setting(1.0, "WatchMatch re-reads when no NOTIFY came.")
    scoring_list_limit: int = _setting(200, "Most matches in the console's pick list.")
    scorer_console_poll_seconds: float = _setting(2.0, "Console: re-read the match this often.")
    scorer_session_cache_seconds: float = _setting(
        5.0,
        "Gateway: a scorer's session is re-read this often, not per tap; a sign-out elsewhere "
        "or a disabled account takes effect within it (0: every request).",
    )
    provider_max_bytes: int = _setting(1_000_000, "Largest provider message taken.")
    provider_nice: int = _setting(10, "CPU priority step of the provider pull process.")
    admin_sign_in_required: bool = _setting(True, "Operators must sign in.")
    failover_extra_delay_seconds: float = _setting(120.0, "Most extra delay a failover may add.")

    # -- Admin console (Section 3 seed, "Screens") ------------------------------------------
    admin_refresh_seconds: float = _setting(
        2.0, "Console: live parts (cards, progress bars) refresh this often."
    )
    admin_runs_shown: int = _setting(20, "Console: runs listed per integration.")
    admin_chart_runs: int = _setting(30, "Console: runs in the rows-and-duration chart.")
    admin_units_found: int = _setting(50, "Console: most units one search lists.")
    admin_rows_shown: int = _setting(100, "Console: most rows a run's page lists per section.")
    admin_max_form_bytes: int = _setting(64 * 1024, "Console: largest form it accepts.")

    # -- Sign-in (accounts of the admin console and the scorer console) ----------------------
    session_hours: float = _setting(12.0, "A session ends after this long without use.")
    session_cookie_secure: bool = _setting(False, "Send the session cookie over HTTPS only.")
    password_min_length: int = _setting(10, "Shortest password an account may have.")
    sign_in_free_failures: int = _setting(5, "Failed sign-ins before a login is slowed down.")
    sign_in_lock_seconds: float = _setting(2.0, "First wait after too many failures; doubles.")
    sign_in_lock_max_seconds: float = _setting(300.0, "Longest wait after failed sign-ins.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read OMNIUM_* from `environ` (the process environment by default) over the defaults.

        An OMNIUM_ name that is not a setting fails: a typo must not silently keep a default.
        """
        env = os.environ if environ is None else environ
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for name, raw in env.items():
            if not name.startswith(PREFIX):
                continue
            key = name[len(PREFIX) :].lower()
            if key not in known:
                guess = difflib.get_close_matches(key, known, n=1)
                hint = f" Did you mean {PREFIX}{guess[0].upper()}?" if guess else ""
                raise SettingsError(f"{name} is not a setting omnium knows.{hint}")
            values[key] = parse_value(name, raw, known[key].type)
        values.update(overrides)
        settings = cls(**values)
        settings.check()
        return settings

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def check(self) -> None:
        if self.telemetry_exporter not in ("none", "console", "otlp"):
            raise SettingsError(
                f"OMNIUM_TELEMETRY_EXPORTER is {self.telemetry_exporter!r}; "
                "use none, console or otlp."
            )
        if not 0.0 <= self.telemetry_sample_ratio <= 1.0:
            raise SettingsError(
                f"OMNIUM_TELEMETRY_SAMPLE_RATIO is {self.telemetry_sample_ratio}; use a share "
                "from 0 (no new trace) to 1 (every one), such as 0.01 for one in a hundred."
            )
        if not 1 <= self.grpc_retry_attempts <= 5:
            raise SettingsError(
                f"OMNIUM_GRPC_RETRY_ATTEMPTS is {self.grpc_retry_attempts}; gRPC tries a call "
                "1 to 5 times, so use a number from 1 (never again) to 5."
            )
        if (
            self.grpc_retry_first_backoff_seconds <= 0
            or self.grpc_retry_max_backoff_seconds <= 0
            or self.grpc_retry_backoff_multiplier <= 0
        ):
            raise SettingsError(
                "OMNIUM_GRPC_RETRY_FIRST_BACKOFF_SECONDS, OMNIUM_GRPC_RETRY_MAX_BACKOFF_SECONDS "
                "and OMNIUM_GRPC_RETRY_BACKOFF_MULTIPLIER must be above 0 (gRPC refuses the "
                "retry policy otherwise); set OMNIUM_GRPC_RETRY_ATTEMPTS=1 for no tries again."
            )
        if self.live_redis_connections < 5:
            raise SettingsError(
                f"OMNIUM_LIVE_REDIS_CONNECTIONS is {self.live_redis_connections}; live push "
                "needs 4 for replays and one for each Games it reads, so use 5 or more."
            )
        if self.grpc_tokens:
            raise SettingsError(
                f"OMNIUM_GRPC_TOKENS lists {len(self.grpc_tokens)} token(s) without names, and is "
                "no longer read: each token now belongs to a named caller with a role, so the "
                "log can say who called. Replace it with OMNIUM_GRPC_CALLERS, one "
                "name:role:token item per caller, e.g. "
                "OMNIUM_GRPC_CALLERS=admin-console:operator-console:<token>,"
                "imports:service:<token>; give each process its own token in "
                "OMNIUM_GRPC_TOKEN. The roles are in docs/callers.md."
            )
        if bool(self.grpc_tls_cert_file) != bool(self.grpc_tls_key_file):
            raise SettingsError(
                "Set both OMNIUM_GRPC_TLS_CERT_FILE and OMNIUM_GRPC_TLS_KEY_FILE for TLS, "
                "or neither."
            )
        if self.grpc_tls_client_auth and not (self.grpc_tls_ca_file and self.grpc_tls_cert_file):
            raise SettingsError(
                "OMNIUM_GRPC_TLS_CLIENT_AUTH needs OMNIUM_GRPC_TLS_CA_FILE (to check callers) "
                "and OMNIUM_GRPC_TLS_CERT_FILE and OMNIUM_GRPC_TLS_KEY_FILE (to serve and to "
                "present as a caller)."
            )

    def require_database_url(self) -> str:
        if not self.database_url:
            raise SettingsError(
                "OMNIUM_DATABASE_URL is not set. Start the dev stack with 'make run', "
                "or point it at a PostgreSQL server (postgresql://user@host:port/db)."
            )
        return self.database_url


def describe_settings() -> list[tuple[str, str, str]]:
    """(variable, default, what it does) for every setting, for docs/settings.md."""
    rows = []
    for f in fields(Settings):
        if f.name.startswith("_"):
            continue
        rows.append((PREFIX + f.name.upper(), repr(f.default), f.metadata.get("doc", "")))
    return rows
