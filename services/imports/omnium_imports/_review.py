"""Alerts and Waiting for you: one row per open cause, raised once, cleared when it is gone."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import asyncpg
import httpx

from omnium_alerts import post_alert
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow
from omnium_settings import Settings

log = logging.getLogger(__name__)


class Alerts:
    """Raises and clears an integration's alerts; new ones also go to the webhook, if set."""

    def __init__(self, settings: Settings, http: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self.http = http

    async def raise_(
        self,
        conn: asyncpg.Connection,
        integration_id: str,
        kind: str,
        message: str,
        run_id: str | None = None,
    ) -> bool:
        """True when this raised a new alert; an open one of the same kind is left as it is."""
        alert_id = await conn.fetchval(
            *QUERIES.bind(
                "raise_alert",
                integration_id=integration_id,
                kind=kind,
                message=message,
                run_id=run_id,
            )
        )
        if alert_id is None:
            return False
        log.warning("alert %s (%s): %s", alert_id, kind, message)
        alert = {
            "alert": alert_id,
            "integration": integration_id,
            "kind": kind,
            "message": message,
            "run": run_id,
        }
        if await post_alert(self.http, self.settings, alert):
            await conn.execute(QUERIES["alert_sent"], alert_id)
        return True

    async def restate(
        self,
        conn: asyncpg.Connection,
        integration_id: str,
        kind: str,
        message: str,
        run_id: str | None = None,
    ) -> None:
        """The open alert of this kind says `message` now; raised if none is open. A person
        already told of the cause is not told of it a second time."""
        restated = await conn.fetchval(
            *QUERIES.bind(
                "restate_alert", integration_id=integration_id, kind=kind, message=message
            )
        )
        if restated is None:
            await self.raise_(conn, integration_id, kind, message, run_id)

    async def clear(self, conn: asyncpg.Connection, integration_id: str, *kinds: str) -> None:
        await conn.execute(QUERIES["clear_alerts"], integration_id, list(kinds))


async def open_review(
    conn: asyncpg.Connection,
    integration_id: str,
    kind: str,
    subject_key: str,
    question: str,
    run_id: str | None = None,
    subject_id: str | None = None,
) -> int | None:
    """A new item in Waiting for you; None when an open one for the same key is there."""
    item: int | None = await conn.fetchval(
        *QUERIES.bind(
            "open_review",
            integration_id=integration_id,
            kind=kind,
            subject_key=subject_key,
            question=question,
            run_id=run_id,
            subject_id=subject_id,
        )
    )
    return item


async def ask_about_held(
    conn: asyncpg.Connection,
    integration_id: str,
    run_id: str,
    mapped: Sequence[MappedRow],
    counted: Mapping[int, str],
    held_reasons: Mapping[int, str],
    complete: bool,
) -> None:
    """Waiting for you: one open question per key this run held, by the mapping or by the
    command service; a key no longer held closes its own. So does one a complete run no
    longer lists: its question is about a row Scout does not send any more."""
    held: dict[str, str] = {}
    answered: set[str] = set()
    for row in mapped:
        if not row.key:
            continue
        outcome = counted.get(row.position)
        if outcome == "held":
            held[row.key] = held_reasons.get(row.position) or row.reason
        elif outcome != "not_sent":
            answered.add(row.key)
    if not held and not await conn.fetchval(QUERIES["any_open_reviews"], integration_id, "held"):
        # Nothing held now, and no question open to close: a run of tens of thousands of
        # unchanged rows does not send every key to the database for nothing.
        return
    for key, question in held.items():
        await open_review(conn, integration_id, "held", key, question, run_id)
    await conn.execute(
        *QUERIES.bind(
            "close_reviews",
            integration_id=integration_id,
            kind="held",
            subject_keys=sorted(answered.difference(held)),
            resolved_by="import",
        )
    )
    listed = [row.key for row in mapped if row.key]
    if complete and listed:
        await conn.execute(
            *QUERIES.bind(
                "close_unlisted_reviews",
                integration_id=integration_id,
                kind="held",
                listed_keys=listed,
                resolved_by="import",
            )
        )


# A run ending so raises this alert kind, with these words before its reason.
_ALERTS = {
    "failed": ("run_failed", "Run failed"),
    "partly_done": ("batch_failed", "Run partly done"),
    "paused_by_guard": ("guard", "Run paused by a check"),
}


def threshold(settings: Settings, own: Mapping[str, object], name: str) -> int:
    """An alert threshold: the integration's own (its file's settings) over the service's."""
    value = own.get(name, getattr(settings.imports, name))
    assert isinstance(value, int)
    return value


async def tell_of_run(
    alerts: Alerts,
    conn: asyncpg.Connection,
    integration_id: str,
    status: str,
    reason: str | None,
    run_id: str | None,
    own: Mapping[str, object] | None = None,
) -> None:
    """After a run: an alert for each cause a person must know of, and those whose cause is
    gone cleared. Each kind is cleared only by what it is about, so a page run (many an hour
    on a Games day) clears nothing but its own failure. `own`: the integration's settings,
    whose alert thresholds override the service's."""
    own = own or {}
    run = await conn.fetchrow(QUERIES["run_for_alerts"], run_id) if run_id else None
    full = run is not None and run["build"] == "all"
    if status == "partly_done" and run_id is not None:
        # The seed's "a batch that failed 3 times": this attempt and the resumes before it.
        needed = threshold(alerts.settings, own, "alert_batch_failed_times")
        attempts = 1 + await conn.fetchval(QUERIES["resumes_of_run"], run_id)
        if attempts >= needed:
            await alerts.raise_(
                conn,
                integration_id,
                "batch_failed",
                f"Run partly done {attempts} times: {reason}",
                run_id,
            )
    elif status in _ALERTS:
        kind, words = _ALERTS[status]
        await alerts.raise_(conn, integration_id, kind, f"{words}: {reason}", run_id)
    elif status == "scout_failed":
        needed = threshold(alerts.settings, own, "alert_scout_failed_in_row")
        recent = await conn.fetch(QUERIES["recent_scout_statuses"], integration_id, needed)
        if len(recent) == needed and all(r["scout_status"] == "failed" for r in recent):
            await alerts.raise_(
                conn,
                integration_id,
                "scout_failed",
                f"Scout's last {needed} runs failed their own checks: {reason}",
                run_id,
            )
    if status == "done":
        # A failed run is answered by itself done, by a full run done, or (a check that could
        # not read Scout at all, with no run) by any run read and written.
        await conn.execute(
            *QUERIES.bind(
                "clear_run_failed", integration_id=integration_id, run_id=run_id, full_run=full
            )
        )
    if run is not None and full:
        # A new full run from Scout: it is not quiet.
        await alerts.clear(conn, integration_id, "quiet")
        needed = threshold(alerts.settings, own, "alert_scout_failed_in_row")
        recent = await conn.fetch(QUERIES["recent_full_scout_statuses"], integration_id, needed)
        if len(recent) == needed and all(r["scout_status"] == "passed" for r in recent):
            await alerts.clear(conn, integration_id, "scout_failed")
    await clear_settled(alerts, conn, integration_id)


async def clear_settled(alerts: Alerts, conn: asyncpg.Connection, integration_id: str) -> None:
    """Alerts whose cause is a state clear once no run is in it: a guard pause once no pause
    waits for Start (started, or overtaken by a newer full run that passed its guards), a
    failed batch once no run is left partly done."""
    if not await conn.fetchval(QUERIES["any_open_reviews"], integration_id, "guard"):
        await alerts.clear(conn, integration_id, "guard")
    if not await conn.fetchval(QUERIES["any_partly_done"], integration_id):
        await alerts.clear(conn, integration_id, "batch_failed")
