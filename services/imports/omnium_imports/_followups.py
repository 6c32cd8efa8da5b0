"""The settle window's timer: every minute, Scout is asked to read again the keys now due."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from omnium_db import DATABASE_ERRORS
from omnium_imports._scout import ScoutClient, ScoutError
from omnium_imports._sql import QUERIES
from omnium_settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PageRunAsked:
    """One page run this process asked Scout for: the tests and the log read it."""

    integration_code: str
    scout_run_id: str
    keys: tuple[str, ...]


class FollowUps:
    """Asks for the settle window's page runs on a timer, whether or not Scout makes new runs
    (F17: a protest decided late was missed when reads waited for a new run).

    Every copy of the imports process runs one. A key is claimed and moved on in the same
    UPDATE (FOR UPDATE SKIP LOCKED), before Scout is asked, so two copies never ask for the same
    key, and an asked key waits `followup_asked_wait_seconds` for its page run before it is
    asked for again."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool, scout: ScoutClient) -> None:
        self.settings = settings
        self.pool = pool
        self.scout = scout
        self.passes = 0  # finished passes, for the tests
        self.asked: list[PageRunAsked] = []  # kept short, like Worker.results

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every `followup_seconds` until `stop`; a database outage skips a pass."""
        wait = self.settings.imports.followup_seconds
        while not stop.is_set():
            try:
                await self.ask_due(stop)
            except DATABASE_ERRORS as exc:
                log.warning(
                    "follow-ups: cannot reach the database (%s); looking again in %.0f s", exc, wait
                )
            except Exception:
                # A bug in one pass must not stop the timer: that is how results went unread.
                log.exception("follow-ups: a pass failed; the next one is in %.0f s", wait)
            self.passes += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await stop.wait()

    async def ask_due(self, stop: asyncio.Event | None = None) -> list[PageRunAsked]:
        """One pass: for each integration that is on, one page run of its keys due, oldest
        first, at most `followup_keys_per_run` of them."""
        async with self.pool.acquire() as conn:
            integrations = await conn.fetch(QUERIES["followup_integrations"])
        asked: list[PageRunAsked] = []
        for integration in integrations:
            if stop is not None and stop.is_set():
                break
            page_run = await self._ask(integration)
            if page_run is not None:
                asked.append(page_run)
        self.asked = [*self.asked[-99:], *asked]
        return asked

    async def _ask(self, integration: asyncpg.Record) -> PageRunAsked | None:
        code = integration["code"]
        claimed = await self._claim(integration["id"])
        due = [row for row in claimed if row["asked_again_at"] is not None]
        if len(due) < len(claimed):
            log.info(
                "%s: %s keys left their settle window without a last page run",
                code,
                len(claimed) - len(due),
            )
        if not due:
            return None
        keys = [row["subject_key"] for row in due]
        try:
            run_id = await self.scout.request_page_run(
                integration["scout_base_url"], integration["scout_job"], keys
            )
        except ScoutError as exc:
            log.warning(
                "%s: could not ask Scout for a page run of %s keys due in their settle window "
                "(%s); they are asked for again in %.0f s",
                code,
                len(keys),
                exc,
                self.settings.imports.followup_seconds,
            )
            await self._give_back(code, integration["id"], due)
            return None
        log.info(
            "%s: asked Scout for page run %s of %s keys due in their settle window",
            code,
            run_id,
            len(keys),
        )
        return PageRunAsked(code, run_id, tuple(keys))

    async def _claim(self, integration_id: str) -> list[asyncpg.Record]:
        """Keys due, as many as one page run takes and as Scout has room for: the keys asked
        and not read yet count against `followup_page_runs_at_once` page runs' worth."""
        imports = self.settings.imports
        async with self.pool.acquire() as conn:
            waiting: int = await conn.fetchval(
                QUERIES["keys_asked_not_read"], integration_id, imports.followup_asked_wait_seconds
            )
            room = imports.followup_page_runs_at_once * imports.followup_keys_per_run - waiting
            if room <= 0:
                log.info(
                    "follow-ups: %s keys asked of Scout are not read yet; asking for no more now",
                    waiting,
                )
                return []
            claimed: list[asyncpg.Record] = await conn.fetch(
                *QUERIES.bind(
                    "claim_due_reads",
                    integration_id=integration_id,
                    at_most=min(imports.followup_keys_per_run, room),
                    asked_wait_seconds=imports.followup_asked_wait_seconds,
                    settle_seconds=imports.settle_until_hours * 3600,
                )
            )
        return claimed

    async def _give_back(
        self, code: str, integration_id: str, due: Sequence[asyncpg.Record]
    ) -> None:
        """Scout was not asked: the keys are due again now, not after the asked wait."""
        try:
            async with self.pool.acquire() as conn:
                await conn.execute(
                    *QUERIES.bind(
                        "give_back_due_reads",
                        integration_id=integration_id,
                        subject_keys=[row["subject_key"] for row in due],
                        were_due=[row["was_due"] for row in due],
                        asked_again_at=[row["asked_again_at"] for row in due],
                    )
                )
        except DATABASE_ERRORS as exc:
            log.warning(
                "%s: could not put %s keys back as due (%s); they are asked for again in %.0f s",
                code,
                len(due),
                exc,
                self.settings.imports.followup_asked_wait_seconds,
            )
