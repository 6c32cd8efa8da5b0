"""From ImportsService messages to what a screen shows: words, times, bars, old → new."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, tzinfo
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from omnium.command.v1 import command_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium.imports.v1 import imports_pb2
from omnium_admin._times import ago, ago_filter, at_filter, in_zone_words, local, utc

RUN_WORDS = {
    "received": "Running",
    "applying": "Running",
    "done": "Done",
    "partly_done": "Partly done",
    "failed": "Failed",
    "scout_failed": "Scout's run failed its checks",
    "older": "Older than the last run",
    "paused_by_guard": "Paused by a check",
}
RUNNING = ("received", "applying")
# What a run read: Scout's whole site, one day, or a few keys again (the settle window).
BUILD_WORDS = {"all": "full run", "day": "day run", "page": "page run"}
OUTCOME_WORDS = {
    "accepted": "changed",
    "unchanged": "unchanged",
    "kept_by_hand": "kept as set by hand",
    "held": "held",
    "refused": "refused",
    "not_placed": "not placed",
    "problem": "problem",
    "duplicate": "sent twice",
    # One word per outcome, so a run's figures add up to its rows: a row the fast path skipped
    # is counted here only, not also as "unchanged".
    "fast_path": "unchanged, skipped early",
    "not_sent": "not written yet",
    "skipped": "skipped by the mapping",
    "older": "left as a newer run wrote it",
}


def when(stamp: timestamp_pb2.Timestamp | None) -> datetime | None:
    if stamp is None or (stamp.seconds == 0 and stamp.nanos == 0):
        return None
    return stamp.ToDatetime(tzinfo=UTC)


def took(ms: int) -> str:
    if ms <= 0:
        return "—"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def value_text(value: struct_pb2.Value | None) -> str:
    if value is None or value.WhichOneof("kind") in (None, "null_value"):
        return "(empty)"
    plain = json_format.MessageToDict(value)
    if isinstance(plain, float) and plain.is_integer():
        return str(int(plain))
    return str(plain)


def health(h: imports_pb2.Health, zone: tzinfo = UTC) -> dict[str, Any]:
    at = when(h.at)
    return {
        "word": h.word,
        "ok": h.ok,
        "waiting": False,
        "detail": in_zone_words(h.detail, zone),
        # The hover: the event's time and UTC.
        "at": f"{local(at, zone)} · {utc(at)}" if at else "",
        "ago": ago(at, zone),
    }


def run(r: imports_pb2.Run, zone: tzinfo = UTC) -> dict[str, Any]:
    received = when(r.received_at)
    total, done = r.batch_total, r.batch_done
    running = r.status in RUNNING
    # Full only when it is: a run paused or failed before its batches wrote nothing.
    filled = done if total else (1 if r.status == "done" else 0)
    return {
        "id": r.id,
        "integration": r.integration_code,
        "scout_run_id": r.scout_run_id,
        "status": r.status,
        "word": RUN_WORDS.get(r.status, r.status),
        "running": running,
        "reason": in_zone_words(r.reason, zone),
        "build": r.build,
        "kind": BUILD_WORDS.get(r.build, "run"),
        "rows": r.row_count,
        "rows_why": rows_why(r),
        "batch_total": total,
        "batch_done": done,
        "bar_max": total or 1,
        "bar_value": filled,
        "bar_text": (
            f"{done} / {total}"
            if total or running
            else ("nothing to write" if r.status == "done" else "nothing written")
        ),
        "percent": round(100 * filled / (total or 1)),
        "outcomes": {OUTCOME_WORDS.get(k, k): v for k, v in sorted(r.outcomes.items())},
        "received": local(received, zone) if received else "",
        "received_at": received.isoformat() if received else "",
        "received_ago": ago(received, zone),
        "finished_at": _iso(when(r.finished_at)),
        "took_ms": r.duration_ms,
        "took": took(r.duration_ms),
        "waited": took(r.waited_ms) if r.waited_ms >= 1000 else "",
    }


def rows_why(r: imports_pb2.Run) -> str:
    """Why a run has no rows, in words: 0 alone reads as a fault."""
    if r.row_count:
        return ""
    if r.status in RUNNING:
        return "not counted yet: the run is still reading"
    if r.status == "scout_failed":
        return "Scout's run failed its own checks, so nothing was read"
    if r.status == "failed":
        return "the run failed before any row was read"
    if r.status == "older":
        return "older than the last run, so it was not read"
    return "Scout sent no rows in this run (nothing to read yet)"


# The imports service's word for an integration added less than a check interval ago, with no
# run yet: nothing is wrong with it, and nothing is in yet either.
NOT_DUE = "Not due yet"


def _iso(at: datetime | None) -> str:
    return at.isoformat() if at else ""


def card(i: imports_pb2.Integration, zone: tzinfo = UTC) -> dict[str, Any]:
    scout, ours = health(i.scout, zone), health(i.omnium, zone)
    # Nothing green unless both lines are fine, no alert is open
    # and nothing waits for a person.
    green = bool(scout["ok"] and ours["ok"] and not i.open_alerts and not i.waiting)
    starting = not green and ours["word"] == NOT_DUE and not i.open_alerts
    verdict = "All fine" if green else "Needs a look"
    # A person paused it, or turned it off, on purpose: neither a failure nor fine.
    deliberate = i.state in ("paused", "off") and not i.open_alerts
    if deliberate:
        verdict = "Paused: nothing is read or written" if i.state == "paused" else "Off"
        scout["waiting"] = not scout["ok"]
        ours["waiting"] = True
    elif starting:
        verdict = "Waiting for its first run"
        # Neither line is wrong: shown as waiting, not in red.
        scout["waiting"] = not scout["ok"]
        ours["waiting"] = True
    return {
        "code": i.code,
        "name": i.name,
        "state": i.state,
        "target": i.target,
        "scout": scout,
        "omnium": ours,
        "green": green,
        "starting": starting,
        "deliberate": deliberate,
        "verdict": verdict,
        "alerts": [
            {
                "kind": a.kind,
                "message": in_zone_words(a.message, zone),
                "ago": ago(when(a.raised_at), zone),
                "raised_at": _iso(when(a.raised_at)),
            }
            for a in i.open_alerts
        ],
        **_card_runs(i, zone),
        "waiting": i.waiting,
    }


def _card_runs(i: imports_pb2.Integration, zone: tzinfo = UTC) -> dict[str, Any]:
    """The card's runs: the newest full run (its health is judged by it), the newest page or
    day run when newer, and a run a check paused while Start can still write it."""
    full = run(i.last_full_run, zone) if i.HasField("last_full_run") else None
    newest = run(i.last_run, zone) if i.HasField("last_run") else None
    paused = run(i.paused_run, zone) if i.HasField("paused_run") else None
    shown = (full or newest, newest if newest and newest["build"] != "all" else None, paused)
    return {
        # What the card shows of its runs: the page is drawn anew when it changes.
        "runs_key": ";".join(f"{r['id']}:{r['status']}" if r else "-" for r in shown),
        "last_full_run": full,
        "last_run": shown[0],
        "last_page_run": shown[1],
        "paused_run": paused,
    }


def changes(entries: Iterable[command_pb2.FieldChange]) -> list[dict[str, str]]:
    return [
        {
            "kind": c.subject_kind,
            "id": c.subject_id,
            "field": c.field,
            "old": value_text(c.old if c.HasField("old") else None),
            "new": value_text(c.new if c.HasField("new") else None),
        }
        for c in entries
    ]


def rows(entries: Iterable[imports_pb2.RowEntry], limit: int) -> list[dict[str, Any]]:
    out = []
    for e in entries:
        changed, kept = changes(e.changes), changes(e.kept_by_hand)
        out.append(
            {
                "position": e.position,
                "key": e.key,
                "outcome": OUTCOME_WORDS.get(e.outcome, e.outcome),
                "reason": e.reason,
                "changes": changed,
                "kept": kept,
                # The unit the row was written to, for a link to its page: Scout's key alone
                # leaves an operator searching for it.
                "unit_id": next(
                    (c["id"] for c in (*changed, *kept) if c["kind"] == "unit" and c["id"]), ""
                ),
            }
        )
        if len(out) >= limit:
            break
    return out


def chart(
    runs: list[dict[str, Any]], width: int = 600, height: int = 120, slots: int = 20
) -> dict[str, Any]:
    """Two bar series, oldest first: rows and time taken, each scaled to its own maximum."""
    points = list(reversed([r for r in runs if not r["running"]]))
    if not points:
        return {"bars": [], "width": width, "height": height, "max_rows": 0, "max_took": ""}
    most_rows = max(r["rows"] for r in points) or 1
    most_ms = max(r["took_ms"] for r in points) or 1
    # At least `slots` slots wide, so two runs do not look like two walls.
    step = width / max(len(points), slots)
    half = max(1.0, step / 2 - 1)
    bars = []
    for n, r in enumerate(points):
        rows_h = (height - 14) * r["rows"] / most_rows
        took_h = (height - 14) * r["took_ms"] / most_ms
        bars.append(
            {
                "x": round(n * step, 1),
                "w": round(half, 1),
                "rows_y": round(height - rows_h, 1),
                "rows_h": round(rows_h, 1),
                "took_x": round(n * step + half + 1, 1),
                "took_y": round(height - took_h, 1),
                "took_h": round(took_h, 1),
                "title": f"{r['received']}: {r['rows']} rows, {r['took']}, {r['word']}",
                "bad": r["status"] not in ("done",),
            }
        )
    return {
        "bars": bars,
        "width": width,
        "height": height,
        "max_rows": most_rows,
        "max_took": took(most_ms),
    }


def seconds(value: float) -> str:
    if value <= 0:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _feed(f: delivery_pb2.Feed, zone: tzinfo) -> dict[str, Any]:
    last = f.last_received if f.HasField("last_received") else None
    scope = f.discipline or "whole Games"
    if f.top_n:
        scope += f", top {f.top_n}"
    delivered = last is not None and last.outcome == "delivered"
    return {
        "id": f.id,
        "what": f"{f.kind} ({f.format.upper()}, {scope})",
        "file_name": f.file_name,
        "version": f.version,
        "owed": f.owed,
        "last_outcome": last.outcome if last else "",
        "last_version": last.version if last else 0,
        "last_delay": seconds(last.delay_seconds) if last and delivered else "",
        "last_at": _iso(when(last.delivered_at)) if last and delivered else "",
        "last_error": last.error if last else "",
    }


def _changes(n: int) -> str:
    return "1 change" if n == 1 else f"{n} changes"


def promise_words(p: delivery_pb2.Promise, enabled: bool, wanted: float) -> tuple[str, str]:
    """The client's verdict in words and its colour: `green` only when changes were sent in the
    window and enough of them arrived in time; `quiet` (grey) when there was nothing to measure."""
    target, window = seconds(p.target_seconds), f"{p.window_seconds / 60:g} min"
    if not enabled:
        return "Off: nothing is sent to this client.", "quiet"
    if p.sends == 0:
        return (
            f"Nothing to measure: no change was sent to this client in the last {window}.",
            "quiet",
        )
    share = f"{p.share * 100:.0f}%"
    told = f"{share} of {_changes(p.sends)} arrived within {target} of being saved"
    if p.kept:
        return f"Promise kept: {told}.", "green"
    return f"Promise broken: only {told}; at least {wanted * 100:.0f}% must.", "bad"


def delivery_client(
    c: delivery_pb2.Client, zone: tzinfo = UTC, wanted: float = 0.95
) -> dict[str, Any]:
    """One client on the Delivery screen: the promise over the window, each figure in words, its
    feeds, and why it is failing, if it is."""
    p = c.promise
    reasons = list(c.alerts)
    if p.last_error and not any(p.last_error in r for r in reasons):
        reasons.append(f"The newest send failed: {p.last_error}")
    verdict, colour = promise_words(p, c.enabled, wanted)
    if reasons and c.enabled:
        colour = "bad"
    target, window = seconds(p.target_seconds), f"{p.window_seconds / 60:g} min"
    last = when(p.last_delivered_at)
    return {
        "code": c.code,
        "name": c.name,
        "transport": "files (SFTP)" if c.transport == "sftp" else "webhook",
        "enabled": c.enabled,
        "verdict": verdict,
        "colour": colour,
        "failing": colour == "bad",
        "reasons": reasons,
        "kept": p.kept,
        "target": target,
        "window": window,
        "sends": p.sends,
        "within": p.within_target,
        "share": f"{p.share * 100:.0f}%" if p.sends else "—",
        "in_time": (
            f"{p.within_target} of {_changes(p.sends)} within {target} of the save"
            if p.sends
            else f"no change sent in the last {window}"
        ),
        "misses": p.misses,
        "misses_words": (
            f"{p.misses} of {_changes(p.sends)} arrived later than {target}, or not at all"
            if p.misses
            else "none: every change sent arrived in time"
            if p.sends
            else "none to count"
        ),
        "p50": seconds(p.p50_seconds),
        "p95": seconds(p.p95_seconds),
        "last_at": _iso(last),
        # A resend, or a feed's first whole file, is a delivery the promise does not count.
        "last_outside": bool(last and p.sends == 0),
        "feeds": [_feed(f, zone) for f in c.feeds],
    }


FILTERS: dict[str, Callable[..., Any]] = {"took": took, "at": at_filter, "ago": ago_filter}
