"""Times as the Games' people read them: in the event's own time zone on the page, UTC on hover.

One helper for every screen: the `at` and `ago` template filters and the words the live parts
send draw a moment through `shown` and `ago` here, so no screen shows a bare UTC time.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
from markupsafe import Markup, escape

# The event's zone is read again after this long: a Games day's zone does not change, but a
# console started before the reference was loaded must not keep UTC for ever.
ZONE_SECONDS = 30.0
# A time of day a service wrote into a sentence ("It resumes by itself at 12:32:04 UTC").
_UTC_CLOCK = re.compile(r"\b([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9]) UTC\b")


def zone_named(name: str | None) -> tzinfo:
    """The zone an event names (`Asia/Tokyo`); UTC when it names none we know."""
    try:
        return ZoneInfo(name) if name else UTC
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def moment(value: object) -> datetime | None:
    """A datetime from what a screen holds: a datetime, or the ISO text a live part sends."""
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def local(at: datetime, zone: tzinfo) -> str:
    """`07 Dec 21:11:32 JST`: the time a person at the venue reads on the wall."""
    return at.astimezone(zone).strftime("%d %b %H:%M:%S %Z")


def utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%d %b %Y %H:%M:%S UTC")


def ago(at: datetime | None, zone: tzinfo = UTC, now: datetime | None = None) -> str:
    """How long ago, in words; an old moment as its date and time in the event's zone."""
    if at is None:
        return "never"
    seconds = ((now or datetime.now(UTC)) - at).total_seconds()
    if seconds < 5:
        return "just now"
    if seconds < 90:
        return f"{int(seconds)} s ago"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h ago"
    return at.astimezone(zone).strftime("%d %b %H:%M %Z")


def in_zone_words(text: str, zone: tzinfo, today: datetime | None = None) -> str:
    """A sentence's UTC times of day in the event's zone: "at 12:32:04 UTC" → "at 21:32:04 JST
    (12:32:04 UTC)". The offset of the day the sentence was read (`today`) is used."""
    day = (today or datetime.now(UTC)).astimezone(UTC)

    def local_clock(found: re.Match[str]) -> str:
        at = day.replace(hour=int(found[1]), minute=int(found[2]), second=int(found[3]))
        return f"{at.astimezone(zone):%H:%M:%S %Z} ({found[0]})"

    return text if zone is UTC else _UTC_CLOCK.sub(local_clock, text)


def shown(value: object, zone: tzinfo, *, relative: bool = False) -> Markup:
    """A `<time>` element: the event's local time (or how long ago), UTC in its title."""
    at = moment(value)
    if at is None:
        return Markup("")
    text = ago(at, zone) if relative else local(at, zone)
    hover = f"{local(at, zone)} · {utc(at)}" if relative else utc(at)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        at.isoformat(), escape(hover), escape(text)
    )


def _zone(context: jinja2.runtime.Context) -> tzinfo:
    zone = context.get("zone")
    return zone if isinstance(zone, tzinfo) else UTC


@jinja2.pass_context
def at_filter(context: jinja2.runtime.Context, value: object) -> Markup:
    return shown(value, _zone(context))


@jinja2.pass_context
def ago_filter(context: jinja2.runtime.Context, value: object) -> Markup:
    return shown(value, _zone(context), relative=True)


class ZoneCache:
    """The event's zone, read at most every ZONE_SECONDS."""

    def __init__(self) -> None:
        self.zone: tzinfo = UTC
        self.read_at = -ZONE_SECONDS

    def fresh(self) -> bool:
        return time.monotonic() - self.read_at < ZONE_SECONDS

    def keep(self, name: Any) -> tzinfo:
        self.zone = zone_named(name if isinstance(name, str) else None)
        self.read_at = time.monotonic()
        return self.zone
