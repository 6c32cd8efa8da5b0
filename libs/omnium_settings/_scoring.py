"""The scoring section of the settings: the scorer console, its sign-in and sessions, and the
provider door (pushes, pulls and their limits), which the gateway and scoring both read."""

from __future__ import annotations

from dataclasses import dataclass

from omnium_settings._shared import setting


@dataclass(frozen=True, slots=True)
class ScoringSettings:
    """Scoring."""

    port: int = setting(50052, "Scoring service (gRPC).", env="scoring_port")
    address: str = setting(
        "127.0.0.1:50052",
        "Where the gateway reaches scoring: host:port, IP:port copies or dns:///name:port.",
        env="scoring_address",
    )
    metrics_port: int = setting(9052, "Scoring service: /metrics.", env="scoring_metrics_port")
    nice: int = setting(0, "CPU priority step of the scoring process.", env="scoring_nice")
    scorer_sign_in_required: bool = setting(True, "Scorers must sign in.")
    scorer_assignment_required: bool = setting(
        True,
        "A scorer account scores only the matches assigned to it (by match, or by venue and "
        "day); operators and admins score any. Off, for a small event: every scorer scores any.",
    )
    sports_dir: str = setting(
        "", "Folder of sport files; empty: the repo's sports/.", env="scoring_sports_dir"
    )
    providers_dir: str = setting(
        "",
        "Folder of provider files; empty: the repo's providers/ (make run: dev/providers).",
        env="scoring_providers_dir",
    )
    attempts: int = setting(
        5, "Times an action is re-checked when the match moved on.", env="scoring_attempts"
    )
    finished_status: str = setting(
        "UNOFFICIAL",
        "Unit status when the sport's rules say the match is finished.",
        env="scoring_finished_status",
    )
    match_cache_seconds: float = setting(
        30.0,
        "Scoring checks the next action against the match as it last saw it for this long "
        "(the road still checks match_seq); 0: read every action's match from PostgreSQL.",
        env="scoring_match_cache_seconds",
    )
    recent_actions: int = setting(
        20, "Latest actions the console lists.", env="scoring_recent_actions"
    )
    sync_max_actions: int = setting(
        500, "Most queued actions in one Sync.", env="scoring_sync_max_actions"
    )
    watch_poll_seconds: float = setting(
        1.0, "WatchMatch re-reads when no NOTIFY came.", env="scoring_watch_poll_seconds"
    )
    list_limit: int = setting(
        200, "Most matches in the console's pick list.", env="scoring_list_limit"
    )
    scorer_console_poll_seconds: float = setting(2.0, "Console: re-read the match this often.")
    scorer_session_cache_seconds: float = setting(
        5.0,
        "Gateway: a scorer's session is re-read this often, not per tap; a sign-out elsewhere "
        "or a disabled account takes effect within it (0: every request).",
    )
    scorer_watch_per_session: int = setting(
        4,
        "Gateway: most match watch streams (/score/api/matches/{id}/watch) one signed-in session "
        "holds on one gateway worker; past it, 429 with Retry-After (0: no cap).",
    )
    scorer_watch_per_address: int = setting(
        64,
        "Gateway: most match watch streams one client address holds on one gateway worker (a "
        "venue's scorers may share one address); past it, 429 with Retry-After (0: no cap).",
    )
    scorer_watch_retry_after_seconds: int = setting(
        10, "Gateway: the Retry-After sent with a 429 to a client past its most watch streams."
    )
    provider_max_bytes: int = setting(
        1_000_000, "Largest provider message taken; the gateway reads no more of a push body."
    )
    provider_max_actions: int = setting(500, "Most <Action> elements in one provider message.")
    provider_day_max_bytes: int = setting(
        2_000_000_000,
        "Raw provider bytes kept per provider per day (UTC); past it, 429 until midnight UTC.",
    )
    provider_rate_per_second: float = setting(
        10.0, "Gateway: provider pushes per second one provider may send, across every copy."
    )
    provider_burst: int = setting(50, "Gateway: provider pushes one provider may send at once.")
    provider_wrong_key_per_minute: float = setting(
        10.0,
        "Gateway: pushes with a wrong or missing key (or to an unknown provider) one client "
        "address may send per minute; past it, 429 before the key is even looked at.",
    )
    provider_wrong_key_burst: int = setting(
        10, "Gateway: wrong-key pushes one client address may send at once."
    )
    provider_retry_after_seconds: int = setting(
        5, "Gateway: Retry-After sent with a 503 when scoring did not answer a provider push."
    )
    provider_keys_seconds: float = setting(
        5.0,
        "Gateway: how long it trusts the push providers' key hashes it read from the database; "
        "a key matching none is read again at most once a second (a rotated key works at once).",
    )
    provider_local_buckets: int = setting(
        10_000,
        "Gateway, while Redis is down: most provider-door buckets one worker keeps (oldest "
        "dropped); each worker then limits on its own.",
    )
    provider_nice: int = setting(10, "CPU priority step of the provider pull process.")
    failover_extra_delay_seconds: float = setting(120.0, "Most extra delay a failover may add.")
