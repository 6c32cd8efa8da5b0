"""The shared sections of the settings: servers, database roads, gRPC, telemetry, sign-in and
the dev stack. Every number from the design documents is a field with that default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


def setting(default: Any, doc: str, env: str | None = None) -> Any:
    """A field with its default, its one-line doc and, when it differs from the field's name,
    the flat name its variable is read from."""
    return field(default=default, metadata={"doc": doc, "env": env})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Servers."""

    environment: Literal["development", "production"] = setting(
        "production",
        "production: every process refuses to start while a dev default is in force (see "
        "`python -m omnium_process check --deploy`); development: `make run` and the tests.",
    )
    trusted_proxies: tuple[str, ...] = setting(
        (),
        "Proxies (CIDRs, comma list) whose X-Forwarded-For is believed: the client address is "
        "the nearest one not in these. Empty: the connection's own address.",
    )
    database_url: str | None = setting(
        None, "PostgreSQL to use. Unset: the dev stack starts a private one."
    )
    redis_url: str | None = setting(
        None, "Redis to use. Unset: the dev stack starts a private one."
    )
    bind_host: str = setting("127.0.0.1", "Address every server listens on.")
    log_level: str = setting("INFO", "Python log level.")
    log_format: Literal["text", "json"] = setting(
        "text",
        "text: a line with time, level, logger and message (dev); json: one JSON object a line "
        "with level, logger, message, trace and span ids, service, copy and exception (the "
        "manifests set it).",
    )
    http_access_log: bool = setting(
        False,
        "A log line (logger omnium.access) per request the gateway and the console answer: "
        "method, route, path without query, status, seconds, client.",
    )
    http_grace_seconds: float = setting(
        10.0, "On SIGTERM, time the doorbell's and the console's requests in flight get."
    )
    alert_webhook_url: str | None = setting(None, "Where new alerts are POSTed as JSON.")
    alert_webhook_timeout_seconds: float = setting(
        5.0, "Longest wait for the alert webhook to answer."
    )
    outbound_allowed_networks: tuple[str, ...] = setting(
        (),
        "Ranges (CIDRs, comma list) that client webhooks, Scout and the alert webhook may reach "
        "although they are not public (loopback, link-local, private...). Empty: public only. "
        "An IPv6 address carrying an IPv4 one (::ffff:..., 64:ff9b::..., 2002:...) needs the "
        "IPv4 range.",
    )
    outbound_answer_max_bytes: int = setting(
        1024 * 1024, "Largest answer read from a client webhook, the alert webhook or Scout."
    )


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """Database roads."""

    people_pool_size: int = setting(10, "Connections for people's and scorers' commands.")
    people_transaction_seconds: float = setting(10.0, "Longest a person's command may take.")
    import_pool_size: int = setting(4, "Connections for import batches.")
    import_lock_timeout_seconds: float = setting(5.0, "Import batch: longest wait for a lock.")
    import_statement_timeout_seconds: float = setting(30.0, "Import batch: longest statement.")
    import_idle_seconds: float = setting(30.0, "Import batch: longest idle in a transaction.")
    batch_max_units: int = setting(25, "Most units (matches) in one import batch.")
    reader_pool_size: int = setting(10, "Connections for reads (timeline, public API).")
    connect_timeout_seconds: float = setting(
        2.0,
        "Pools and LISTENs: longest wait for one host of the DSN before the next is tried.",
        env="database_connect_timeout_seconds",
    )
    # A primary whose machine hangs neither answers nor closes its connections; these give
    # them up on the client's side well inside Patroni's leader ttl (20 s), so writes move to
    # the new leader (docs/high-availability.md, "When the primary freezes").
    answer_grace_seconds: float = setting(
        5.0,
        "Pools: a statement unanswered this long past its road's own limit (and a cancel of it "
        "unanswered this long) gives its connection up, even when the server never answers.",
        env="database_answer_grace_seconds",
    )
    tcp_dead_seconds: float = setting(
        10.0,
        "Pools and LISTENs: a connection whose server's machine stops acknowledging (sent data "
        "or keepalive probes) is closed by the kernel after about this long.",
        env="database_tcp_dead_seconds",
    )
    listen_retry_first_seconds: float = setting(
        0.1, "LISTEN connection lost: first wait before connecting again (then doubled)."
    )
    # Short, so every listener is back within about a second of the primary answering (the
    # failover drill's restart_listeners_back_s): one connect a try per process is cheap.
    listen_retry_max_seconds: float = setting(
        0.5, "LISTEN connection lost: longest wait between tries to connect again."
    )
    listen_probe_seconds: float = setting(
        5.0, "LISTEN connections are probed this often: a lost machine may never close one."
    )
    listen_probe_timeout_seconds: float = setting(
        2.0, "A LISTEN connection's probe unanswered this long counts as a lost connection."
    )
    # Migrations are a release step (`python -m omnium_db migrate`): a short lock wait given up
    # and tried again never queues the Games' writes behind an ALTER for long.
    migrate_lock_timeout_seconds: float = setting(
        2.0, "python -m omnium_db migrate: longest wait for a table's lock before it gives way."
    )
    migrate_lock_tries: int = setting(
        30, "python -m omnium_db migrate: tries of one migration that did not get its locks."
    )
    migrate_retry_seconds: float = setting(
        2.0, "python -m omnium_db migrate: pause before a migration that gave way tries again."
    )
    migrate_wait_seconds: float = setting(
        600.0,
        "python -m omnium_db migrate: while another migration runs, wait this long for it to "
        "finish (0: refuse at once).",
    )
    schema_ahead_allowed: int = setting(
        10,
        "Services start on a schema at most this many migrations newer than their code (the "
        "next release's expand steps, or a rollback); never on an older one.",
    )


@dataclass(frozen=True, slots=True)
class GrpcSettings:
    """gRPC."""

    auth_required: bool = setting(
        True, "Callers must send a bearer token.", env="grpc_auth_required"
    )
    callers: tuple[str, ...] = setting(
        (),
        "Who may call a gRPC server: name:role:token items (comma list). List a caller twice, "
        "with its old and new token, to rotate it. Roles: docs/callers.md.",
        env="grpc_callers",
    )
    tokens: tuple[str, ...] = setting(
        (),
        "No longer read: tokens now belong to named callers (OMNIUM_GRPC_CALLERS). Set, the "
        "process stops at start-up and says what to write instead.",
        env="grpc_tokens",
    )
    token: str | None = setting(
        None,
        "Bearer token this process sends to other services: its own caller's token.",
        env="grpc_token",
    )
    session_cache_seconds: float = setting(
        5.0,
        "How long a gRPC server trusts a console's person session it looked up (a sign-out or "
        "a disabled account counts within it); 0 looks it up on every call.",
        env="grpc_session_cache_seconds",
    )
    max_message_bytes: int = setting(
        4 * 1024 * 1024, "Largest gRPC message, each way.", env="grpc_max_message_bytes"
    )
    grace_seconds: float = setting(
        10.0, "On SIGTERM, time given to calls in flight.", env="grpc_grace_seconds"
    )
    deadline_seconds: float = setting(
        10.0, "Deadline on calls to another service.", env="grpc_deadline_seconds"
    )
    reconnect_max_seconds: float = setting(
        1.0,
        "Longest wait before a channel tries a copy that was gone again.",
        env="grpc_reconnect_max_seconds",
    )
    retry_attempts: int = setting(
        3,
        "Tries of an idempotent call when a copy is gone or stopping (1: none; at most 5).",
        env="grpc_retry_attempts",
    )
    retry_first_backoff_seconds: float = setting(
        0.1,
        "Longest wait before the first try again (gRPC waits a random part of it).",
        env="grpc_retry_first_backoff_seconds",
    )
    retry_max_backoff_seconds: float = setting(
        1.0,
        "Longest wait before any later try; the call's deadline bounds all tries.",
        env="grpc_retry_max_backoff_seconds",
    )
    retry_backoff_multiplier: float = setting(
        2.0,
        "Each try's longest wait is the one before times this.",
        env="grpc_retry_backoff_multiplier",
    )
    tls_cert_file: str | None = setting(
        None,
        "PEM certificate; set with the key for TLS. The server serves it; with client auth, "
        "this process's channels present it too.",
        env="grpc_tls_cert_file",
    )
    tls_key_file: str | None = setting(None, "PEM private key for TLS.", env="grpc_tls_key_file")
    tls_ca_file: str | None = setting(
        None,
        "PEM CA bundle. Set, every gRPC channel this process opens uses TLS and trusts only "
        "these; with client auth, the server takes only callers whose certificate they signed.",
        env="grpc_tls_ca_file",
    )
    tls_client_auth: bool = setting(
        False,
        "Mutual TLS: the server refuses callers without a certificate from "
        "OMNIUM_GRPC_TLS_CA_FILE, and channels present OMNIUM_GRPC_TLS_CERT_FILE.",
        env="grpc_tls_client_auth",
    )
    mesh: bool = setting(
        False,
        "A service mesh gives every gRPC connection mutual TLS, so omnium serves and calls "
        "plain gRPC inside the pod. Production without it needs the TLS files.",
        env="grpc_mesh",
    )
    tls_server_name: str | None = setting(
        None,
        "The name channels expect in a server's certificate, when the address is not that "
        "name (an IP address, say). Unset: the address's host.",
        env="grpc_tls_server_name",
    )


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """Telemetry and metrics."""

    exporter: Literal["none", "console", "otlp"] = setting(
        "none", "Where traces go: none, console or otlp.", env="telemetry_exporter"
    )
    otlp_endpoint: str = setting("http://127.0.0.1:4317", "OTLP/gRPC collector for traces.")
    sample_ratio: float = setting(
        1.0,
        "Share of new traces kept, 0 to 1 (0.01: one in a hundred). A trace is started at a "
        "request or a ring, and every hop after follows the first one's choice.",
        env="telemetry_sample_ratio",
    )
    metrics_sample_seconds: float = setting(
        5.0, "How often gauges that take a query (queue depth and age, outbox lag) are read."
    )


@dataclass(frozen=True, slots=True)
class SignInSettings:
    """Sign-in (accounts of the admin console and the scorer console)."""

    session_hours: float = setting(12.0, "A session ends after this long without use.")
    session_cookie_secure: bool | None = setting(
        None,
        "Send the session cookie over HTTPS only. Unset: yes in production, no in development "
        "(the dev stack serves plain HTTP).",
    )
    password_min_length: int = setting(10, "Shortest password an account may have.")
    free_failures: int = setting(
        5,
        "Failed sign-ins one client address may make on one login per window before it waits.",
        env="sign_in_free_failures",
    )
    login_address_window_seconds: float = setting(
        300.0,
        "Window of sign_in_free_failures: the longest a slowed-down address waits for a login.",
        env="sign_in_login_address_window_seconds",
    )
    address_failures: int = setting(
        30,
        "Failed sign-ins one client address may make, over every login, per window.",
        env="sign_in_address_failures",
    )
    address_window_seconds: float = setting(
        600.0,
        "Window of sign_in_address_failures.",
        env="sign_in_address_window_seconds",
    )
    login_failures: int = setting(
        50,
        "Failed sign-ins one login may take, from every address, per window (the ceiling).",
        env="sign_in_login_failures",
    )
    login_window_seconds: float = setting(
        600.0,
        "Window of sign_in_login_failures: the longest a stranger can hold a login.",
        env="sign_in_login_window_seconds",
    )
    hash_threads: int = setting(
        0,
        "Password checks run at once per process (0: the CPUs the process may use).",
        env="sign_in_hash_threads",
    )
    hash_queue: int = setting(
        8,
        "Password checks that may wait for a thread; past them sign-in answers 503 at once.",
        env="sign_in_hash_queue",
    )
    busy_retry_seconds: float = setting(
        2.0,
        "Retry-After of a sign-in refused because every password check is taken.",
        env="sign_in_busy_retry_seconds",
    )
    hsts_seconds: int = setting(
        31_536_000,
        "Consoles in production: Strict-Transport-Security max-age (browsers keep to HTTPS).",
        env="console_hsts_seconds",
    )


@dataclass(frozen=True, slots=True)
class DevSettings:
    """Dev stack (local stand-ins for the outside world)."""

    scout_simulator_port: int = setting(8090, "Scout simulator (HTTP, dev and tests).")
    sftp_sink_port: int = setting(8022, "Dev stack: the local SFTP server clients' files go to.")
    webhook_sink_port: int = setting(8092, "Dev stack: the local webhook receiver.")
