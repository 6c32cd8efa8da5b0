"""Settings: typed, read once from OMNIUM_* over defaults, typos refused."""

from __future__ import annotations

import pytest

from omnium_settings import Settings, SettingsError, describe_settings


def test_defaults_are_the_seed_numbers() -> None:
    s = Settings.from_env({})
    assert (s.gateway.cache_ttl_live, s.gateway.cache_ttl_scheduled, s.gateway.cache_ttl_final) == (
        3,
        60,
        21_600,
    )
    assert (
        s.gateway.cache_ttl_reference,
        s.gateway.cache_ttl_leaderboard,
        s.gateway.cache_ttl_negative,
    ) == (3_600, 60, 45)
    assert s.gateway.cache_stale_window == 30
    assert s.database.batch_max_units == 25
    assert (
        s.database.import_lock_timeout_seconds,
        s.database.import_statement_timeout_seconds,
    ) == (5.0, 30.0)
    assert s.database.people_transaction_seconds == 10.0
    assert (s.imports.scout_page_size, s.imports.scout_max_rows, s.imports.scout_tries) == (
        500,
        50_000,
        3,
    )
    assert (s.imports.lease_renew_seconds, s.imports.lease_expire_seconds) == (10.0, 60.0)
    assert (
        s.imports.guard_min_share,
        s.imports.guard_max_not_placed,
        s.imports.guard_max_refused,
    ) == (0.5, 0.1, 0.1)
    assert (s.imports.guard_max_cleared, s.imports.guard_max_reopened) == (10, 5)
    assert s.imports.followup_keys_per_run == 250
    assert (
        s.delivery.feed_debounce_seconds,
        s.delivery.feed_rebuild_seconds,
        s.delivery.poll_seconds,
    ) == (
        1.0,
        60.0,
        5.0,
    )
    assert (s.imports.nice, s.delivery.nice) == (10, 5)
    assert s.command.port == 50051 and s.gateway.port == 8080


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
    assert s.gateway.cache_ttl_live == 5
    assert s.imports.guard_min_share == 0.25
    assert s.grpc.auth_required is False
    assert s.grpc.callers == ("a:reader:x", "b:service:y", "c:provider:z")
    assert s.server.database_url == "postgresql://x/y"
    assert s.telemetry.exporter == "console"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OMNIUM_CACHE_TTL_LIV": "5"}, "Did you mean OMNIUM_CACHE_TTL_LIVE?"),
        ({"OMNIUM_CACHE_TTL_LIVE": "soon"}, "OMNIUM_CACHE_TTL_LIVE='soon' is not a valid int"),
        ({"OMNIUM_GRPC_AUTH_REQUIRED": "maybe"}, "is not a valid bool"),
        ({"OMNIUM_TELEMETRY_EXPORTER": "jaeger"}, "is not a valid"),
        ({"OMNIUM_GRPC_TLS_CERT_FILE": "/x.pem"}, "Set both"),
        ({"OMNIUM_LIVE_REDIS_CONNECTIONS": "4"}, "4 for replays and one for each Games"),
        ({"OMNIUM_GATEWAY_PUBLIC_URL": "api.example.org"}, "with its scheme and no query"),
        ({"OMNIUM_GATEWAY_PUBLIC_URL": "https://a.example?x=1"}, "with its scheme and no query"),
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


def test_sections_read_the_variables_they_always_had() -> None:
    s = Settings.from_env(
        {
            "OMNIUM_IMPORTS_PORT": "6053",
            "OMNIUM_GATEWAY_WORKERS": "4",
            "OMNIUM_GRPC_DEADLINE_SECONDS": "2.5",
            "OMNIUM_SIGN_IN_FREE_FAILURES": "3",
        }
    )
    assert s.imports.port == 6053
    assert s.gateway.workers == 4
    assert s.grpc.deadline_seconds == 2.5
    assert s.sign_in.free_failures == 3
    # Everything else keeps its default, section by section.
    assert s.command.port == 50051 and s.scoring.port == 50052


def test_flat_names_still_override_and_read() -> None:
    s = Settings.from_env({}, gateway_port=0, scout_page_size=100)
    assert (s.gateway.port, s.imports.scout_page_size) == (0, 100)
    again = s.replace(grpc_token="t", admin_sign_in_required=False)
    assert (again.grpc.token, again.admin.sign_in_required) == ("t", False)
    assert again.imports.scout_page_size == 100, "replace keeps what it was not given"
    assert s.grpc.token is None, "replace makes a copy"
    assert again.value("gateway_port") == 0 and again.value("grpc_token") == "t"


def test_a_flat_name_that_is_not_a_setting_is_refused_with_a_guess() -> None:
    with pytest.raises(SettingsError, match="Did you mean scout_page_size"):
        Settings.from_env({}).replace(scout_page_sise=1)
    with pytest.raises(SettingsError, match="Did you mean scout_page_size"):
        Settings.from_env({}, scout_pagesize=1)
    with pytest.raises(SettingsError, match="not a setting"):
        Settings.from_env({}).value("gateway_prot")


def test_replace_checks_again() -> None:
    with pytest.raises(SettingsError, match="1 to 5 times"):
        Settings.from_env({}).replace(grpc_retry_attempts=9)


def test_every_variable_is_read_by_exactly_one_field() -> None:
    names = [name for name, _, _ in describe_settings()]
    assert len(names) == len(set(names))
    assert "OMNIUM_IMPORTS_PORT" in names and "OMNIUM_IMPORTS_NICE" in names
