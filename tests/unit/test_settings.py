"""Settings: typed, read once from OMNIUM_* over defaults, typos refused."""

from __future__ import annotations

import pytest

from omnium_settings import Settings, SettingsError, describe_settings


def test_defaults_are_the_seed_numbers() -> None:
    s = Settings.from_env({})
    assert (s.cache_ttl_live, s.cache_ttl_scheduled, s.cache_ttl_final) == (3, 60, 21_600)
    assert (s.cache_ttl_reference, s.cache_ttl_leaderboard, s.cache_ttl_negative) == (3_600, 60, 45)
    assert s.cache_stale_window == 30
    assert s.batch_max_units == 25
    assert (s.import_lock_timeout_seconds, s.import_statement_timeout_seconds) == (5.0, 30.0)
    assert s.people_transaction_seconds == 10.0
    assert (s.scout_page_size, s.scout_max_rows, s.scout_tries) == (500, 50_000, 3)
    assert (s.lease_renew_seconds, s.lease_expire_seconds) == (10.0, 60.0)
    assert (s.guard_min_share, s.guard_max_not_placed, s.guard_max_refused) == (0.5, 0.1, 0.1)
    assert (s.guard_max_cleared, s.guard_max_reopened) == (10, 5)
    assert s.followup_keys_per_run == 250
    assert (s.feed_debounce_seconds, s.feed_rebuild_seconds, s.delivery_poll_seconds) == (
        1.0,
        60.0,
        5.0,
    )
    assert (s.imports_nice, s.delivery_nice) == (10, 5)
    assert s.command_port == 50051 and s.gateway_port == 8080


def test_values_are_read_and_typed() -> None:
    s = Settings.from_env(
        {
            "OMNIUM_CACHE_TTL_LIVE": "5",
            "OMNIUM_GUARD_MIN_SHARE": "0.25",
            "OMNIUM_GRPC_AUTH_REQUIRED": "off",
            "OMNIUM_GRPC_CALLERS": "a:reader:x, b:service:y,,c:provider:z",
            "OMNIUM_DATABASE_URL": "postgresql://x/y",
            "OMNIUM_TELEMETRY_EXPORTER": "console",
            "PATH": "/usr/bin",
        }
    )
    assert s.cache_ttl_live == 5
    assert s.guard_min_share == 0.25
    assert s.grpc_auth_required is False
    assert s.grpc_callers == ("a:reader:x", "b:service:y", "c:provider:z")
    assert s.database_url == "postgresql://x/y"
    assert s.telemetry_exporter == "console"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OMNIUM_CACHE_TTL_LIV": "5"}, "Did you mean OMNIUM_CACHE_TTL_LIVE?"),
        ({"OMNIUM_CACHE_TTL_LIVE": "soon"}, "OMNIUM_CACHE_TTL_LIVE='soon' is not a valid int"),
        ({"OMNIUM_GRPC_AUTH_REQUIRED": "maybe"}, "is not a valid bool"),
        ({"OMNIUM_TELEMETRY_EXPORTER": "jaeger"}, "is not a valid"),
        ({"OMNIUM_GRPC_TLS_CERT_FILE": "/x.pem"}, "Set both"),
        ({"OMNIUM_LIVE_REDIS_CONNECTIONS": "4"}, "4 for replays and one for each Games"),
    ],
)
def test_bad_values_fail_with_a_plain_message(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_database_url_is_required_where_needed() -> None:
    with pytest.raises(SettingsError, match="OMNIUM_DATABASE_URL is not set"):
        Settings.from_env({}).require_database_url()


def test_every_setting_is_described() -> None:
    rows = describe_settings()
    assert len(rows) > 60
    assert all(name.startswith("OMNIUM_") and doc for name, _, doc in rows)


def test_old_bare_tokens_stop_the_process_and_say_what_to_write() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"OMNIUM_GRPC_TOKENS": "t1,t2"})
    said = str(raised.value)
    assert "OMNIUM_GRPC_TOKENS lists 2 token(s) without names" in said
    assert "OMNIUM_GRPC_CALLERS" in said and "name:role:token" in said
    assert "t1" not in said
