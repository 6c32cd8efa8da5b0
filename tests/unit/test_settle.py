"""The settle window's schedule: hourly, then every 6 hours, then daily, up to 72 hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from omnium_imports._settle import first_read, next_read
from omnium_settings import Settings

OFFICIAL = datetime(2026, 9, 26, 12, 0, tzinfo=UTC)
SETTINGS = Settings.from_env({})


def _reads() -> list[float]:
    """Hours after official of every read, following the schedule from the first."""
    hours = []
    at: datetime | None = first_read(OFFICIAL, SETTINGS)
    while at is not None:
        hours.append((at - OFFICIAL) / timedelta(hours=1))
        at = next_read(OFFICIAL, at, SETTINGS)
    return hours


def test_the_schedule() -> None:
    assert _reads() == [1, 2, 3, 4, 5, 6, 12, 18, 24, 48, 72]


def test_settings_change_it() -> None:
    short = Settings.from_env({}, settle_until_hours=6.0)
    assert next_read(OFFICIAL, OFFICIAL + timedelta(hours=6), short) is None
    assert next_read(OFFICIAL, OFFICIAL + timedelta(hours=5, minutes=30), short) == (
        OFFICIAL + timedelta(hours=6)
    )


def test_every_hour_of_it_is_a_setting() -> None:
    """Each number of the schedule scaled (a test's 'hour' of 0.2 s) scales the reads alike."""
    scale = 0.2 / 3600
    fast = Settings.from_env(
        {},
        **{
            name: SETTINGS.value(name) * scale
            for name in (
                "settle_first_hours",
                "settle_hourly_until_hours",
                "settle_six_hourly_until_hours",
                "settle_until_hours",
                "settle_hourly_step_hours",
                "settle_six_hourly_step_hours",
                "settle_daily_step_hours",
            )
        },
    )
    reads: list[float] = []
    at: datetime | None = first_read(OFFICIAL, fast)
    while at is not None:
        reads.append(round((at - OFFICIAL) / timedelta(seconds=0.2), 6))
        at = next_read(OFFICIAL, at, fast)
    assert reads == _reads()
