"""The one road's transaction and its retry: read, plan, write; under contention, locks first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar, cast

import asyncpg

from omnium.command.v1 import command_pb2
from omnium_command import _statements as statements
from omnium_command._answers import render, show_dry_run
from omnium_command._intent import ReadKeys, Request
from omnium_command._parse import (
    Refusal,
    guess_batch_keys,
    guess_command_keys,
    parse_batch,
    parse_command,
)
from omnium_command._plan import Planner, Stale
from omnium_command._rows import ReadState
from omnium_command._sql import QUERIES
from omnium_db import connection_lost, is_outage, not_connected
from omnium_settings import Settings

log = logging.getLogger(__name__)

_FINISHED_RUNS = frozenset({"done", "failed", "scout_failed", "older"})


class _Busy(Exception):
    """Nothing was written; the sender should try again."""


# Failures that leave nothing written and go away on their own: the sender tries again.
_TRY_AGAIN: dict[type[BaseException], str] = {
    _Busy: "other writers kept changing the same records",
    asyncpg.LockNotAvailableError: "a record it needs was locked by another writer for too long",
    asyncpg.DeadlockDetectedError: "it crossed another writer's locks",
    asyncpg.SerializationError: "another writer changed the same records at the same moment",
    asyncpg.QueryCanceledError: "the database took too long",
    asyncpg.UniqueViolationError: "another writer added the same record at the same moment",
    asyncpg.ForeignKeyViolationError: "a record it names was removed at the same moment",
    asyncpg.IdleInTransactionSessionTimeoutError: "the database connection timed out",
    TimeoutError: "the command took longer than its time limit",
    Stale: "the match moved on since this action was checked against it",
}

# A restart or failover of the database (seconds to half a minute). Where the connection broke
# under a command, its commit may have been sent and its answer lost: the reason does not claim
# that nothing was saved. The command id makes the resend safe either way.
_NOT_REACHED = (
    "Nothing was saved: the database could not be reached (it may be restarting or failing "
    "over). Send the same command again; it is applied once."
)
_NOT_ANSWERED = (
    "The database did not answer (it may be restarting or failing over), so this may or may "
    "not have been saved. Send the same command again; it is applied once, and the answer "
    "says whether it was saved before."
)


_AnswerT = TypeVar("_AnswerT", command_pb2.Answer, command_pb2.BatchAnswer)


class _Repeat(Exception):
    def __init__(self, answer: bytes | None, request_hash: bytes | None) -> None:
        self.answer = answer
        self.request_hash = request_hash


def _try_again_reason(exc: BaseException, *, connected: bool = True) -> str | None:
    """The plain reason to send the same command again, or None: not a passing failure."""
    if not connected and is_outage(exc):
        return _NOT_REACHED  # No connection was had: nothing was sent.
    if connection_lost(exc):
        return _NOT_ANSWERED
    if not_connected(exc):
        return _NOT_REACHED
    for kind, reason in _TRY_AGAIN.items():
        if isinstance(exc, kind):
            return f"Nothing was saved: {reason}. Send the same command again."
    return None


class Road:
    """Applies commands. One instance per process, holding the two roads' pools."""

    def __init__(self, settings: Settings, people: asyncpg.Pool, imports: asyncpg.Pool) -> None:
        self.settings = settings
        self.people = people
        self.imports = imports
        self._releasing: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def _connection(self, pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
        """A connection of the pool. After a clean finish it goes back after the answer has
        gone, not before (giving it back takes a few turns of the event loop); after a failure
        the answer waits for it, so a statement cancelled by a time limit has really stopped
        before anyone is told nothing was saved."""
        conn = await pool.acquire()
        try:
            yield conn
        except BaseException as exc:
            if connection_lost(exc) or isinstance(exc, asyncpg.ReadOnlySQLTransactionError):
                # Never reused: a connection to a server that became a standby stays open, and
                # the pool's next connection goes to whichever host is the primary now.
                with contextlib.suppress(asyncpg.InterfaceError):  # the pool let it go already
                    conn.terminate()
            await pool.release(conn)
            raise
        task = asyncio.get_running_loop().create_task(pool.release(conn))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    # -- public ---------------------------------------------------------------------------

    async def submit(self, message: command_pb2.Command) -> command_pb2.Answer:
        return await self._answer(
            command_pb2.Answer,
            message.command_id,
            self.people,
            lambda: guess_command_keys(message),
            lambda: parse_command(message),
            time_limit=self.settings.database.people_transaction_seconds,
        )

    async def apply_batch(self, message: command_pb2.ImportBatch) -> command_pb2.BatchAnswer:
        # No time limit of its own: the import road's statement and lock timeouts bound it.
        return await self._answer(
            command_pb2.BatchAnswer,
            message.command_id,
            self.imports,
            lambda: guess_batch_keys(message),
            lambda: parse_batch(message, max_units=self.settings.database.batch_max_units),
            time_limit=None,
        )

    async def _answer(
        self,
        kind: type[_AnswerT],
        command_id: str,
        pool: asyncpg.Pool,
        guess: Callable[[], ReadKeys | None],
        parse: Callable[[], Request],
        *,
        time_limit: float | None,
    ) -> _AnswerT:
        """One command or batch on its road, answered: accepted (with what changed),
        duplicate (the first answer again), refused (why) or try again (nothing saved)."""
        answer = kind(command_id=command_id)
        request: Request | None = None
        connected = False
        limit = asyncio.timeout(time_limit)
        try:
            try:
                async with limit, self._connection(pool) as conn:
                    connected = True
                    request, state = await self._parse_while_reading(conn, guess(), parse)
                    await self._apply(conn, request, answer, state)
            except _Repeat as repeat:
                assert request is not None
                return await self._repeat(pool, request, repeat, kind())
        except Refusal as exc:
            return kind(command_id=command_id, outcome=command_pb2.OUTCOME_REFUSED, reason=str(exc))
        except Exception as exc:
            # A TimeoutError while connecting, not the command's own limit, is the connect
            # timeout: the host did not answer.
            reason = _try_again_reason(exc, connected=connected or limit.expired())
            if reason is None:
                raise
            what = "batch" if kind is command_pb2.BatchAnswer else "command"
            log.warning("%s %s: try again (%r)", what, command_id, exc)
            return kind(command_id=command_id, outcome=command_pb2.OUTCOME_TRY_AGAIN, reason=reason)
        return answer

    # -- the transaction ------------------------------------------------------------------

    async def _parse_while_reading(
        self,
        conn: asyncpg.Connection,
        guess: ReadKeys | None,
        parse: Callable[[], Request],
    ) -> tuple[Request, ReadState | None]:
        """The parsed request, and the read when it was started before the parse with the
        keys the parse then asked for (else None: read after the parse).

        The read goes to PostgreSQL first and the parse runs while PostgreSQL works, so the
        parse costs the command no time of its own.
        """
        if guess is None:
            return parse(), None
        early = asyncio.ensure_future(self._fetch_read(conn, guess))
        await asyncio.sleep(0)  # one turn of the loop: the read is sent
        try:
            request = parse()
        except BaseException:
            # The connection goes back to the pool only once its read has answered.
            with contextlib.suppress(Exception):
                await early
            raise
        state = await early
        return request, (state if request.read_keys() == guess else None)

    async def _apply(
        self,
        conn: asyncpg.Connection,
        request: Request,
        answer: command_pb2.Answer | command_pb2.BatchAnswer,
        state: ReadState | None = None,
    ) -> None:
        # Two round trips when nobody else writes the same records, which is nearly always.
        if state is None:
            state = await self._read(conn, request)
        if await self._plan_and_write(conn, request, state, answer):
            return
        # Someone did: lock first, then read and write under the locks.
        async with conn.transaction():
            text, args = statements.lock(state)
            await conn.fetchrow(text, *args)
            state = await self._read(conn, request)
            if not await self._plan_and_write(conn, request, state, answer):
                raise _Busy("a record it names changed while it held the locks")

    async def _plan_and_write(
        self,
        conn: asyncpg.Connection,
        request: Request,
        state: ReadState,
        answer: command_pb2.Answer | command_pb2.BatchAnswer,
    ) -> bool:
        """Diff against `state` and write; False when a record changed since `state` was read."""
        if state["previous_answer"] is not None:
            raise _Repeat(state["previous_answer"], state["previous_hash"])
        run_batch_done = self._check_batch(request, state)
        plan = Planner(request, statements.refs(state), state).plan()
        answer.Clear()
        answer.command_id = request.command_id
        render(answer, request, plan, state["seq"], run_batch_done)
        if request.batch is not None and request.batch.dry_run:
            # Nothing is written or recorded.
            assert isinstance(answer, command_pb2.BatchAnswer)
            show_dry_run(answer, plan)
            return True
        text, args = statements.write(request, plan, state, answer.SerializeToString())
        medals = plan.writes.medal_updates or plan.writes.medal_inserts
        async with conn.transaction() if medals else contextlib.nullcontext():
            result = await conn.fetchrow(text, *args)
            if medals and result["current"] and result["recorded"]:
                # The other rows' ranks follow from the counts just written, in the same commit.
                await conn.execute(QUERIES["rank_medal_rows"], plan.event_id or state["event_id"])
        if not result["current"]:
            return False
        if not result["recorded"]:
            # Another copy of this command committed while we ran: its write stands.
            raise _Repeat(None, None)
        return True

    async def _read(self, conn: asyncpg.Connection, request: Request) -> ReadState:
        return await self._fetch_read(conn, request.read_keys())

    @staticmethod
    async def _fetch_read(conn: asyncpg.Connection, keys: ReadKeys) -> ReadState:
        text, args = statements.read(keys)
        found = await conn.fetchrow(text, *args)
        return cast(ReadState, statements.NOTHING_READ | dict(found.items()))

    def _check_batch(self, request: Request, state: ReadState) -> int:
        batch = request.batch
        if batch is None:
            return 0
        if state["integration_id"] is None:
            raise Refusal(f"there is no integration {batch.integration_code!r}")
        if state["event_id"] is None:
            raise Refusal(f"there is no event {request.event_code!r}")
        if batch.dry_run:
            return 0
        if state["run_integration_id"] != state["integration_id"]:
            raise Refusal(
                f"run {batch.run_id} of {batch.integration_code} is not recorded; record the run "
                "(status received) before sending its batches"
            )
        if state["run_status"] in _FINISHED_RUNS:
            raise Refusal(
                f"run {batch.run_id} is already {state['run_status']}; it takes no new batches"
            )
        done = state["run_batch_done"]
        assert done is not None  # the run is recorded, and its batch_done is NOT NULL
        return done

    async def _repeat(
        self, pool: asyncpg.Pool, request: Request, repeat: _Repeat, answer: _AnswerT
    ) -> _AnswerT:
        stored, stored_hash = repeat.answer, repeat.request_hash
        if stored is None:
            async with pool.acquire() as conn:
                row = await conn.fetchrow(QUERIES["stored_answer"], request.command_id)
            stored, stored_hash = row["answer"], row["request_hash"]
        if request.request_hash is not None and stored_hash != request.request_hash:
            answer.command_id = request.command_id
            answer.outcome = command_pb2.OUTCOME_REFUSED
            answer.reason = (
                f"command id {request.command_id!r} was used before for a different command; "
                "nothing was written. Give each new command its own id."
            )
            return answer
        answer.ParseFromString(stored)
        answer.outcome = command_pb2.OUTCOME_DUPLICATE
        return answer
