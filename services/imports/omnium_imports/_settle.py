"""The settle window: a result is read again after it first says official — hourly for the
first hours, then every 6 hours, then daily, up to 72 hours (a protest decided late)."""

from __future__ import annotations

from datetime import datetime, timedelta

from omnium_settings import Settings


def first_read(now: datetime, settings: Settings) -> datetime:
    return now + timedelta(hours=settings.settle_first_hours)


def next_read(official_at: datetime, now: datetime, settings: Settings) -> datetime | None:
    """When to read the key again after reading it `now`; None once the window has closed."""
    elapsed = now - official_at
    if elapsed < timedelta(hours=settings.settle_hourly_until_hours):
        step = timedelta(hours=settings.settle_hourly_step_hours)
    elif elapsed < timedelta(hours=settings.settle_six_hourly_until_hours):
        step = timedelta(hours=settings.settle_six_hourly_step_hours)
    else:
        step = timedelta(hours=settings.settle_daily_step_hours)
    end = official_at + timedelta(hours=settings.settle_until_hours)
    if now >= end:
        return None
    return min(now + step, end)
