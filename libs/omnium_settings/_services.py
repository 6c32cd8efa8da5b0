"""The sections of the settings that belong to one service each: command, imports, delivery,
live push, the gateway and the admin console (scoring's, with the provider door, in _scoring)."""

from __future__ import annotations

from dataclasses import dataclass

from omnium_settings._shared import setting


@dataclass(frozen=True, slots=True)
class CommandSettings:
    """Command service."""

    port: int = setting(50051, "Command service (gRPC).", env="command_port")
    address: str = setting(
        "127.0.0.1:50051",
        "Where other services reach command: host:port, IP:port copies or dns:///name:port.",
        env="command_address",
    )
    metrics_port: int = setting(9051, "Command service: /metrics.", env="command_metrics_port")
    database_standby_expected: bool = setting(
        False, "Command alerts while the database has no synchronous standby (HA: true)."
    )
    standby_check_seconds: float = setting(30.0, "How often command asks for the standby.")


@dataclass(frozen=True, slots=True)
class ImportsSettings:
    """Imports."""

    port: int = setting(50053, "Imports service (gRPC).", env="imports_port")
    address: str = setting(
        "127.0.0.1:50053",
        "Where other services reach imports: host:port, IP:port copies or dns:///name:port.",
        env="imports_address",
    )
    metrics_port: int = setting(
        9081, "Imports (doorbell and queue): /metrics.", env="imports_metrics_port"
    )
    doorbell_port: int = setting(8081, "Imports: Scout's doorbell (HTTP).")
    nice: int = setting(10, "CPU priority step of the imports process.", env="imports_nice")
    doorbell_max_bytes: int = setting(1024 * 1024, "Largest doorbell body.")
    doorbell_database_timeout_seconds: float = setting(
        5.0, "Doorbell: longest wait for PostgreSQL before answering 503 (nothing queued)."
    )
    doorbell_retry_after_seconds: int = setting(
        5, "Doorbell: Retry-After sent with a 503 when the ring could not be queued."
    )
    scheduler_seconds: float = setting(
        60.0, "How often the scheduler looks for quiet integrations."
    )
    check_seconds: int = setting(600, "Default: check an integration not heard from for this long.")
    secret_rotation_seconds: int = setting(
        3600, "A doorbell secret replaced from the integration file is still accepted this long."
    )
    lease_renew_seconds: float = setting(10.0, "A running import job renews its lease this often.")
    workers: int = setting(
        2, "Import jobs one imports process runs at once.", env="imports_workers"
    )
    fastpath_lag_seconds: float = setting(
        1.0, "Fast path: extra seconds re-read before the oldest transaction open at a look."
    )
    fastpath_blind_seconds: float = setting(
        60.0, "Fast path: window re-read when other sessions are hidden (no pg_read_all_stats)."
    )
    poll_seconds: float = setting(
        5.0, "Queue poll when no NOTIFY arrives.", env="imports_poll_seconds"
    )
    lease_expire_seconds: float = setting(60.0, "A job not renewed for this long is freed.")
    stop_grace_seconds: float = setting(
        5.0,
        "On SIGTERM, time the batches in flight get before the jobs go back to the queue.",
        env="imports_stop_grace_seconds",
    )
    scout_page_size: int = setting(500, "Rows per page read from Scout.")
    scout_max_rows: int = setting(50_000, "Most rows in one Scout run.")
    scout_row_max_bytes: int = setting(
        16 * 1024, "A page of Scout's rows is read up to scout_page_size times this many bytes."
    )
    scout_timeout_seconds: float = setting(20.0, "Scout HTTP timeout.")
    scout_connect_timeout_seconds: float = setting(8.0, "Scout HTTP connect timeout.")
    scout_tries: int = setting(3, "Tries per Scout call, with growing waits.")
    scout_retry_base_seconds: float = setting(1.0, "First wait between Scout tries; doubles.")
    guard_min_share: float = setting(0.5, "A run with fewer rows than this share of usual pauses.")
    guard_usual_runs: int = setting(
        5, "Written runs that passed the size check by themselves: their median is 'usual'."
    )
    guard_max_not_placed: float = setting(0.1, "Share of rows not placed or held that pauses.")
    guard_max_refused: float = setting(0.1, "Share of rows refused that pauses a run.")
    guard_max_cleared: int = setting(10, "Most records one run may clear before it pauses.")
    guard_max_reopened: int = setting(5, "Most finished units one run may reopen before it pauses.")
    missing_runs_to_review: int = setting(2, "Full runs a key may be missing before review.")
    auto_cancel_missing: bool = setting(False, "Cancel missing units by itself (off: a person).")
    settle_first_hours: float = setting(1.0, "Settle window: first read after official.")
    settle_hourly_until_hours: float = setting(6.0, "Settle window: hourly reads until then.")
    settle_six_hourly_until_hours: float = setting(24.0, "Then every 6 h until then.")
    settle_until_hours: float = setting(72.0, "Then daily until then.")
    settle_hourly_step_hours: float = setting(1.0, "Settle window: the 'hourly' step.")
    settle_six_hourly_step_hours: float = setting(6.0, "Settle window: the 'every 6 h' step.")
    settle_daily_step_hours: float = setting(24.0, "Settle window: the 'daily' step.")
    followup_keys_per_run: int = setting(250, "Most keys in one Scout page run.")
    followup_page_runs_at_once: int = setting(
        2, "Most page runs of one integration asked of Scout and not read yet."
    )
    followup_seconds: float = setting(
        60.0, "How often imports asks Scout for page runs of the keys due in their settle window."
    )
    followup_asked_wait_seconds: float = setting(
        900.0,
        "A key asked for in a page run is asked for again after this if no page run has read it "
        "(Scout's 900 s run limit).",
    )
    alert_scout_failed_in_row: int = setting(2, "Scout runs failed in a row before an alert.")
    alert_batch_failed_times: int = setting(
        3, "Times a run's batches fail to be saved (it and its resumes) before an alert."
    )
    batch_retry_seconds: float = setting(
        90.0, "One batch is tried again this long (a failover) before the run is partly done."
    )
    batch_retry_first_seconds: float = setting(
        0.5, "First wait before a batch is tried again; doubles each time."
    )
    batch_retry_max_seconds: float = setting(10.0, "Longest wait between two tries of a batch.")
    resume_first_seconds: float = setting(
        60.0, "A partly done run resumes by itself after this wait; doubles each time."
    )
    resume_max_seconds: float = setting(900.0, "Longest wait before a partly done run resumes.")
    resume_tries: int = setting(
        6, "Times a partly done run resumes by itself before it waits for a person."
    )
    database_retry_seconds: float = setting(
        60.0,
        "Imports' own reads and writes of a run are tried again this long (a failover).",
        env="imports_database_retry_seconds",
    )
    database_retry_first_seconds: float = setting(
        0.2,
        "First wait before imports' own read or write is tried again; doubles.",
        env="imports_database_retry_first_seconds",
    )
    database_retry_max_seconds: float = setting(
        5.0,
        "Longest wait between two tries of imports' own read or write.",
        env="imports_database_retry_max_seconds",
    )
    batches_in_flight: int = setting(
        4, "Batches of one run sent at once.", env="import_batches_in_flight"
    )
    alert_quiet_intervals: int = setting(3, "Intervals without a new run before an alert.")
    row_log_days: int = setting(30, "Days the import row log is kept.")
    row_log_trim_seconds: float = setting(3600.0, "How often the scheduler trims the row log.")


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    """Delivery."""

    port: int = setting(50054, "Delivery service (gRPC).", env="delivery_port")
    address: str = setting(
        "127.0.0.1:50054",
        "Where the console reaches delivery: host:port, IP:port copies or dns:///name:port.",
        env="delivery_address",
    )
    metrics_port: int = setting(9054, "Delivery service: /metrics.", env="delivery_metrics_port")
    nice: int = setting(5, "CPU priority step of the delivery process.", env="delivery_nice")
    log_days: int = setting(
        30,
        "Days the send log is kept (each feed's newest send is always kept).",
        env="delivery_log_days",
    )
    feed_debounce_seconds: float = setting(1.0, "A burst of writes: one feed rebuild per window.")
    live_debounce_seconds: float = setting(0.25, "Window for live results feeds.")
    feed_rebuild_seconds: float = setting(60.0, "Sweep: rebuild feeds behind their data.")
    poll_seconds: float = setting(
        5.0, "Outbox poll when no NOTIFY arrives.", env="delivery_poll_seconds"
    )
    push_target_seconds: float = setting(2.0, "Target: API and push within this, 95 in 100.")
    sftp_target_seconds: float = setting(10.0, "Target: SFTP files within this, 95 in 100.")
    promise_share: float = setting(
        0.95,
        "Share of a client's changes within its target below which it is alerted.",
        env="delivery_promise_share",
    )
    promise_window_seconds: float = setting(
        900.0,
        "The sliding window the share within target is measured over.",
        env="delivery_promise_window_seconds",
    )
    promise_check_seconds: float = setting(
        15.0,
        "How often each client's share within target is measured (and alerted).",
        env="delivery_promise_check_seconds",
    )
    outbox_lag_seconds: float = setting(
        10.0,
        "Outbox rows saved this recently are read again, for late commits.",
        env="delivery_outbox_lag_seconds",
    )
    lease_seconds: float = setting(
        60.0,
        "A delivery copy holds a client this long; renewed while it sends.",
        env="delivery_lease_seconds",
    )
    clients_at_once: int = setting(
        16, "Clients one delivery process sends to at once.", env="delivery_clients_at_once"
    )
    stop_grace_seconds: float = setting(
        10.0,
        "On SIGTERM, time a send in flight gets to finish; cut after it, it is sent again.",
        env="delivery_stop_grace_seconds",
    )
    retry_seconds: float = setting(
        30.0,
        "After a send failed every try, try that feed again after this.",
        env="delivery_retry_seconds",
    )
    clients_file: str | None = setting(
        None,
        "JSON file of clients and feeds loaded at start (see services/delivery/README.md).",
        env="delivery_clients_file",
    )
    checker_disciplines: tuple[str, ...] = setting(
        (),
        "Disciplines whose results wait for a person's approval (comma list): in every "
        "client's files, the public API and live push.",
    )
    sftp_tries: int = setting(5, "Tries of one SFTP upload, with growing waits.")
    sftp_retry_base_seconds: float = setting(0.5, "First wait between SFTP tries; doubles.")
    sftp_connect_timeout_seconds: float = setting(5.0, "SFTP connect and sign-in timeout.")
    sftp_timeout_seconds: float = setting(15.0, "Longest one SFTP upload may take.")
    webhook_tries: int = setting(5, "Tries of one webhook, with growing waits.")
    webhook_retry_base_seconds: float = setting(0.5, "First wait between webhook tries; doubles.")
    webhook_timeout_seconds: float = setting(5.0, "Webhook HTTP timeout.")
    webhook_secret_overlap_seconds: int = setting(
        86_400,
        "After a client's webhook secret is replaced, how long each webhook is still signed "
        "with the one it replaced too, so the client can switch over without a failure.",
    )


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """Live push."""

    stream_length: int = setting(
        1000, "Live push: events kept per Games for Last-Event-ID resume.", env="live_stream_length"
    )
    heartbeat_seconds: float = setting(
        15.0, "Live push: SSE comment sent when quiet.", env="live_heartbeat_seconds"
    )
    read_grace_seconds: float = setting(
        5.0,
        "Live push: a stream read may take this long past its heartbeat before Redis is down.",
        env="live_read_grace_seconds",
    )
    retry_seconds: float = setting(
        1.0,
        "Live push: after Redis failed, seconds before it is tried again.",
        env="live_retry_seconds",
    )
    backlog_length: int = setting(
        10_000,
        "Live push: changes per Games delivery holds while Redis is down; then a gap.",
        env="live_backlog_length",
    )
    max_streams: int = setting(
        5000,
        "Live push: most SSE streams one gateway worker serves; past it, 503 with Retry-After "
        "(the worker's CPU, not Redis, is the limit).",
        env="live_max_streams",
    )
    listener_queue: int = setting(
        500,
        "Live push: events waiting for one listener before it is too slow: sent a gap and "
        "closed (it resumes with Last-Event-ID).",
        env="live_listener_queue",
    )
    stream_max_seconds: float = setting(
        0.0,
        "Live push: a stream ends after this long with a retry hint, and the client reconnects "
        "with Last-Event-ID, missing nothing (0: never). Lets streams spread again over the "
        "copies after a restart; keep it above a proxy's idle cut.",
        env="live_stream_max_seconds",
    )
    redis_connections: int = setting(
        20,
        "Live push: Redis connections per gateway worker: 4 for replays, one per Games being "
        "read (a stream on one more Games is refused with 503 and Retry-After).",
        env="live_redis_connections",
    )
    max_streams_per_client: int = setting(
        20,
        "Live push: most SSE streams one client (its API key, or its address without one) "
        "holds on one gateway worker; past it, 429 with Retry-After (0: no cap).",
        env="live_max_streams_per_client",
    )
    client_retry_after_seconds: int = setting(
        10,
        "Live push: the Retry-After sent with a 429 to a client past its most streams.",
        env="live_client_retry_after_seconds",
    )


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Public API gateway and its cache."""

    port: int = setting(8080, "Public API gateway (HTTP).", env="gateway_port")
    metrics_port: int = setting(
        9080, "Gateway: /metrics, every worker summed.", env="gateway_metrics_port"
    )
    metrics_dir: str = setting(
        "",
        "Folder the gateway's workers keep their metrics files in; empty: a new temporary one.",
        env="gateway_metrics_dir",
    )
    cache_ttl_live: int = setting(3, "Cache seconds: live units.")
    cache_ttl_scheduled: int = setting(60, "Cache seconds: scheduled units.")
    cache_ttl_final: int = setting(21_600, "Cache seconds: finished results.")
    cache_ttl_reference: int = setting(3_600, "Cache seconds: reference data.")
    cache_ttl_leaderboard: int = setting(60, "Cache seconds: medal tables and leaderboards.")
    cache_ttl_negative: int = setting(45, "Cache seconds: not found.")
    cache_stale_window: int = setting(30, "Seconds a stale copy is served while one refresh runs.")
    cache_stale_if_error_seconds: int = setting(
        86_400, "Seconds a cached copy is still served when PostgreSQL cannot answer."
    )
    workers: int = setting(
        2, "Gateway worker processes sharing the port (SO_REUSEPORT).", env="gateway_workers"
    )
    stop_grace_seconds: float = setting(
        10.0,
        "On SIGTERM, longest a gateway worker takes to stop; live streams end at once.",
        env="gateway_stop_grace_seconds",
    )
    scorer_pool_size: int = setting(
        4,
        "Connections per gateway worker for scorers' sign-in and sessions.",
        env="gateway_scorer_pool_size",
    )
    local_max_entries: int = setting(
        50_000,
        "Most responses one gateway worker keeps in its own memory.",
        env="gateway_local_max_entries",
    )
    local_seconds_without_redis: float = setting(
        1.0,
        "While Redis is down, seconds a worker reuses a response it read itself.",
        env="gateway_local_seconds_without_redis",
    )
    redis_timeout_seconds: float = setting(
        1.0,
        "Gateway: longest wait for one Redis call before reading PostgreSQL instead.",
        env="gateway_redis_timeout_seconds",
    )
    redis_connections: int = setting(
        50,
        "Gateway: Redis connections per worker; more calls wait their turn.",
        env="gateway_redis_connections",
    )
    redis_failures_to_trip: int = setting(
        3,
        "Gateway: failed Redis calls in a row before Redis counts as down for a while.",
        env="gateway_redis_failures_to_trip",
    )
    redis_retry_seconds: float = setting(
        1.0,
        "Gateway: after a Redis failure, seconds before Redis is tried again.",
        env="gateway_redis_retry_seconds",
    )
    fill_lock_seconds: float = setting(
        5.0,
        "Longest one database read may hold a key's lock before another copy reads.",
        env="gateway_fill_lock_seconds",
    )
    refresh_recheck_seconds: float = setting(
        0.1,
        "A stale key another copy is refreshing is looked at again after this long.",
        env="gateway_refresh_recheck_seconds",
    )
    database_timeout_seconds: float = setting(
        5.0,
        "Gateway: longest database read before the answer is 503 (or a stale copy).",
        env="gateway_database_timeout_seconds",
    )
    outbox_poll_seconds: float = setting(
        1.0,
        "Gateway: outbox read when no NOTIFY arrives (invalidations).",
        env="gateway_outbox_poll_seconds",
    )
    anonymous_reads: bool = setting(
        True, "Reads without X-API-Key are allowed.", env="gateway_anonymous_reads"
    )
    anonymous_rate_per_second: float = setting(
        20.0,
        "Requests per second per address without a key (token bucket refill).",
        env="gateway_anonymous_rate_per_second",
    )
    anonymous_burst: int = setting(
        100, "Token bucket size per address without a key.", env="gateway_anonymous_burst"
    )
    console_rate_per_second: float = setting(
        50.0,
        "Requests per second per address to the scorer console and provider pushes (/score/, "
        "/v1/providers/): a bucket of their own, roomy for scorers behind one venue address.",
        env="gateway_console_rate_per_second",
    )
    console_burst: int = setting(
        500,
        "Token bucket size per address for the scorer console and provider pushes.",
        env="gateway_console_burst",
    )
    other_rate_per_second: float = setting(
        10.0,
        "Requests per second per address to every other route (probes, the OpenAPI document, "
        "unknown paths): a bucket apart from the reads'.",
        env="gateway_other_rate_per_second",
    )
    other_burst: int = setting(
        50,
        "Token bucket size per address for the probes, the document and unknown paths.",
        env="gateway_other_burst",
    )
    rate_clients: int = setting(
        50_000,
        "Most clients (API keys, addresses) one gateway worker keeps rate-limit state for; the "
        "least recently seen is forgotten first (Redis still holds its bucket).",
        env="gateway_rate_clients",
    )
    public_metrics: bool = setting(
        False,
        "Also serve /metrics on the public port (limited per address); off: only on the "
        "metrics port.",
        env="gateway_public_metrics",
    )
    public_url: str | None = setting(
        None,
        "The public API's address as clients reach it (https://api.example.org): the OpenAPI "
        "document's servers. Unset: the address the document is read from.",
        env="gateway_public_url",
    )
    contact_name: str = setting(
        "omnium API support",
        "Who integrators ask: the OpenAPI document's info.contact name.",
        env="gateway_contact_name",
    )
    contact_email: str | None = setting(
        None, "The OpenAPI document's info.contact email.", env="gateway_contact_email"
    )
    cors_origins: tuple[str, ...] = setting(
        (),
        "Web origins whose pages may call the public API from a browser (CORS), comma list of "
        "scheme://host[:port]; `*` lets any page make the reads anyone may make without a key "
        "(only with OMNIUM_GATEWAY_ANONYMOUS_READS). Empty: no browser on another origin.",
        env="gateway_cors_origins",
    )
    cors_max_age_seconds: int = setting(
        600,
        "How long a browser may reuse the answer to a CORS preflight (Access-Control-Max-Age).",
        env="gateway_cors_max_age_seconds",
    )
    stream_token_secrets: tuple[str, ...] = setting(
        (),
        "Sign the short-lived tokens a browser opens a live stream with (EventSource cannot "
        "send X-API-Key): made at random, the same on every gateway copy; the first signs, "
        "the others (old ones, while rotating) are still accepted. Empty: no tokens are given.",
        env="gateway_stream_token_secrets",
    )
    stream_token_seconds: int = setting(
        300,
        "How long a live-stream token may be used to open (or reopen) a stream.",
        env="gateway_stream_token_seconds",
    )
    key_rate_per_second: float = setting(
        100.0,
        "Default requests per second per API key (token bucket refill).",
        env="gateway_key_rate_per_second",
    )
    key_burst: int = setting(500, "Default token bucket size per API key.", env="gateway_key_burst")
    api_keys: tuple[str, ...] = setting(
        (), "Client keys, comma list of name:key[:rate_per_second[:burst]].", env="gateway_api_keys"
    )
    keys_reload_seconds: float = setting(
        10.0,
        "Gateway: how often each worker reads the API keys admins made on the console.",
        env="gateway_keys_reload_seconds",
    )
    redis_prefix: str = setting(
        "omnium:gw:",
        "Start of every Redis key and channel the gateway uses.",
        env="gateway_redis_prefix",
    )
    rate_lease_share: float = setting(
        0.05,
        "Share of a bucket one worker takes from Redis at once (fewer Redis calls).",
        env="gateway_rate_lease_share",
    )
    purge_urls: tuple[str, ...] = setting(
        (),
        "Shared caches (Varnish) the outbox relay sends PURGE with xkey-purge to (comma list).",
        env="gateway_purge_urls",
    )
    purge_timeout_seconds: float = setting(
        2.0,
        "Gateway: longest wait for one shared-cache purge before it is tried again.",
        env="gateway_purge_timeout_seconds",
    )
    purge_repeat_seconds: float = setting(
        2.0,
        "Gateway: a purge is sent again this long after, past any worker's late drop.",
        env="gateway_purge_repeat_seconds",
    )


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """Admin console."""

    port: int = setting(8082, "Operators' console (HTTP).", env="admin_port")
    metrics_port: int = setting(9082, "Operators' console: /metrics.", env="admin_metrics_port")
    sign_in_required: bool = setting(True, "Operators must sign in.", env="admin_sign_in_required")
    refresh_seconds: float = setting(
        2.0,
        "Console: live parts (cards, progress bars) refresh this often.",
        env="admin_refresh_seconds",
    )
    runs_shown: int = setting(20, "Console: runs listed per integration.", env="admin_runs_shown")
    chart_runs: int = setting(
        30, "Console: runs in the rows-and-duration chart.", env="admin_chart_runs"
    )
    units_found: int = setting(50, "Console: most units one search lists.", env="admin_units_found")
    rows_shown: int = setting(
        100, "Console: most rows a run's page lists per section.", env="admin_rows_shown"
    )
    max_form_bytes: int = setting(
        64 * 1024, "Console: largest form it accepts.", env="admin_max_form_bytes"
    )
