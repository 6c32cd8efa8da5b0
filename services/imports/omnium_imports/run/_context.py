"""What every stage of a run works with, and what a run ends with.

`Context` holds the resources a process shares between runs: the settings, the pool, Scout's
client, the command service and the caches of key state and pages. A context made `reading()`
writes nothing: its database work runs in read-only transactions and its batches go to the
command service as a dry run. This module imports no stage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg

from omnium.command.v1 import command_pb2_grpc
from omnium_db import outlast
from omnium_imports import _runs
from omnium_imports._keystate import KeyStateCache, up_to_date
from omnium_imports._pages import PageMemory
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutClient
from omnium_settings import Settings

_T = TypeVar("_T")
log = logging.getLogger(__name__)


class HandedOver(Exception):
    """This process is stopping: its run stopped between batches, to go back to the queue
    with its run kept, so another copy continues it at once (saved batches answer duplicate)."""


class StageError(Exception):
    """A stage could not do its work: the run ends failed with this message as its reason, so
    it says what happened and what to do."""


@dataclass(slots=True)
class RunResult:
    """What one job did, for its log line, the job row and the tests."""

    status: str
    run_id: str | None = None
    reason: str | None = None
    outcomes: Counter[str] = field(default_factory=Counter)


def failure_reason(run_id: str | None, stage: str, exc: Exception) -> str:
    """What a failed run's record says: a StageError's own words, or what happened where."""
    if isinstance(exc, StageError):
        log.warning("run %s: %s", run_id, exc)
        return str(exc)
    log.exception("run %s: the %s step failed", run_id, stage)
    return (
        f"Something went wrong on our side in the {stage} step ({type(exc).__name__}: {exc}). "
        "What was saved stays; the run is read again on the next check, or press Run now."
    )


@dataclass(slots=True)
class Context:
    """The resources of a run: one per process, shared by its runs."""

    settings: Settings
    pool: asyncpg.Pool
    scout: ScoutClient
    command: command_pb2_grpc.CommandServiceStub
    # Set when the process stops: no batch is started after it (see HandedOver).
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    key_states: dict[str, KeyStateCache] = field(default_factory=dict)
    page_memories: dict[str, PageMemory] = field(default_factory=dict)
    # False for a dry run: nothing is written, batches are only compared.
    writes: bool = True

    def reading(self) -> Context:
        """The same resources for a run that writes nothing (and is never handed over)."""
        return dataclasses.replace(self, writes=False, stopping=asyncio.Event())

    async def outlast(self, what: str, work: Callable[[], Awaitable[_T]]) -> _T:
        """A read or write of the run's bookkeeping, tried again while the database restarts
        or fails over, so a short outage does not fail the run. Each `work` is safe to run
        twice: one transaction, or writes that come out the same when repeated."""
        imports = self.settings.imports
        return await outlast(
            work,
            what=what,
            seconds=imports.database_retry_seconds,
            first_wait=imports.database_retry_first_seconds,
            max_wait=imports.database_retry_max_seconds,
            log=log,
        )

    async def db(
        self,
        what: str,
        work: Callable[[asyncpg.Connection], Awaitable[_T]],
        *,
        transaction: bool = False,
    ) -> _T:
        """`work` on a connection of its own (in a transaction, if asked), with `outlast`.
        In a context that does not write, always in a read-only transaction."""

        async def once() -> _T:
            async with self.pool.acquire() as conn:
                if self.writes and not transaction:
                    return await work(conn)
                async with conn.transaction(readonly=not self.writes):
                    return await work(conn)

        return await self.outlast(what, once)

    async def finish(
        self, run_id: str, status: str, reason: str | None, outcomes: Counter[str]
    ) -> None:
        """The run closed on record with its status, reason and outcomes."""
        await self.db(
            f"run {run_id}: close",
            lambda conn: _runs.finish(conn, run_id, status, reason, outcomes),
            transaction=True,
        )

    async def end(self, run_id: str, status: str, reason: str | None) -> RunResult:
        """Close the run with this status before its batches: nothing of it was written."""
        await self.finish(run_id, status, reason, Counter())
        return RunResult(status, run_id, reason)

    def page_memory(self, integration_id: str) -> PageMemory:
        """The pages of the integration's last run in this process (the fast path before
        mapping). Pure mapping makes it true whoever ran the runs since: no reload needed."""
        return self.page_memories.setdefault(integration_id, PageMemory())

    async def key_state(self, conn: asyncpg.Connection, integration: Integration) -> KeyStateCache:
        """This process's key state of the integration, brought up to date (_keystate.py)."""
        return await up_to_date(self.key_states, conn, integration, self.settings)
