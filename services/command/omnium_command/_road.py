"""The one road's transaction and its retry: read, plan, write; under contention, locks first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

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
from omnium_command._plan import Plan, Planner, Stale
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

# A restart or failover of the database (seconds to half a minute), before the command reached it.
_NOT_REACHED = (
    "Nothing was saved: the database could not be reached (it may be restarting or failing "
    "over). Send the same command again; it is applied once."
)
# Once the statement that commits has been sent, a failure cannot say whether it was saved: the
# commit may stand on the primary alone (PostgreSQL keeps a commit whose wait for the
# synchronous standby is cut, with only a WARNING), and a failover may yet drop it. Never
# "nothing was saved", never "saved": the resend finds out (see `_repeat`).
_UNKNOWN = (
    "The outcome is unknown: {why}, so this may or may not have been saved. Send the same "
    "command again; it is applied once, and the answer says whether it was saved."
)
_NOT_ANSWERED = _UNKNOWN.format(
    why="the database did not answer after the command was sent (it may be restarting or "
    "failing over)"
)
_NOT_CONFIRMED = _UNKNOWN.format(
    why="the standby database did not confirm the save in time (the save is on one server "
    "only, or not at all)"
)
_WAIT_CUT = _UNKNOWN.format(
    why="the database cut its wait for the standby to confirm the save (the save is on one "
    "server only)"
)
# The SQLSTATE of PostgreSQL's WARNING "canceling wait for synchronous replication ... The
# transaction has already committed locally": the plain warning class, its text translated
# with the server's lc_messages, so any plain warning on a commit counts.
_PLAIN_WARNING = "01000"


@dataclass(slots=True)
class _Commit:
    """How far one command got: `may_be_saved` from the moment a statement that commits is sent
    (or a repeat finds the command id), `wait_cut` once the server said it stopped waiting for
    the synchronous standby."""

    may_be_saved: bool = False
    wait_cut: str | None = None

    def hear(self, _conn: object, message: asyncpg.PostgresLogMessage) -> None:
        if self.may_be_saved and getattr(message, "sqlstate", None) == _PLAIN_WARNING:
            self.wait_cut = str(message)


_AnswerT = TypeVar("_AnswerT", command_pb2.Answer, command_pb2.BatchAnswer)


class _Repeat(Exception):
    """The command id is recorded already: the first answer stands."""


def _try_again_reason(
    exc: BaseException, *, connected: bool = True, may_be_saved: bool = False
) -> str | None:
    """The plain reason to send the same command again, or None: not a passing failure."""
    if may_be_saved and is_outage(exc):
        # Cut off on the client's side (its time limit, a lost connection) after the commit
        # was sent: whatever the server did, nobody here saw it.
        return _NOT_ANSWERED if connection_lost(exc) else _NOT_CONFIRMED
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
    async def _connection(
        self, pool: asyncpg.Pool, commit: _Commit
    ) -> AsyncIterator[asyncpg.Connection]:
        """A connection of the pool, whose warnings `commit` hears. After a clean finish it
        goes back after the answer has gone, not before (giving it back takes a few turns of
        the event loop); after a failure the answer waits for it, so a statement cancelled by a
        time limit has really stopped before anyone is told nothing was saved."""
        conn = await pool.acquire()
        conn.add_log_listener(commit.hear)
        try:
            yield conn
        except BaseException as exc:
            conn.remove_log_listener(commit.hear)
            if connection_lost(exc) or isinstance(exc, asyncpg.ReadOnlySQLTransactionError):
                # Never reused: a connection to a server that became a standby stays open, and
                # the pool's next connection goes to whichever host is the primary now.
                with contextlib.suppress(asyncpg.InterfaceError):  # the pool let it go already
                    conn.terminate()
            await pool.release(conn)
            raise
        conn.remove_log_listener(commit.hear)
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
        duplicate (the first answer again), refused (why) or try again (nothing saved, or the
        outcome unknown)."""
        answer = kind(command_id=command_id)
        request: Request | None = None
        connected = False
        commit = _Commit()
        limit = asyncio.timeout(time_limit)
        what = "batch" if kind is command_pb2.BatchAnswer else "command"
        try:
            async with limit:
                try:
                    async with self._connection(pool, commit) as conn:
                        connected = True
                        request, state = await self._parse_while_reading(conn, guess(), parse)
                        await self._apply(conn, request, answer, commit, state)
                except _Repeat as repeat:
                    assert request is not None
                    return await self._repeat(pool, request, repeat, kind(), commit)
        except Refusal as exc:
            return kind(command_id=command_id, outcome=command_pb2.OUTCOME_REFUSED, reason=str(exc))
        except Exception as exc:
            # A TimeoutError while connecting, not the command's own limit, is the connect
            # timeout: the host did not answer.
            reason = _try_again_reason(
                exc, connected=connected or limit.expired(), may_be_saved=commit.may_be_saved
            )
            if reason is None:
                raise
            log.warning("%s %s: try again (%r)", what, command_id, exc)
            return kind(command_id=command_id, outcome=command_pb2.OUTCOME_TRY_AGAIN, reason=reason)
        if commit.wait_cut is not None:
            # Committed here, with no word from the standby: "saved" would be a guess.
            log.warning("%s %s: try again, outcome unknown (%s)", what, command_id, commit.wait_cut)
            return kind(
                command_id=command_id, outcome=command_pb2.OUTCOME_TRY_AGAIN, reason=_WAIT_CUT
            )
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
        commit: _Commit,
        state: ReadState | None = None,
    ) -> None:
        # Two round trips when nobody else writes the same records, which is nearly always.
        if state is None:
            state = await self._read(conn, request)
        if await self._plan_and_write(conn, request, state, answer, commit):
            return
        # Someone did: lock first, then read and write under the locks.
        async with conn.transaction():
            text, args = statements.lock(state)
            await conn.fetchrow(text, *args)
            state = await self._read(conn, request)
            if not await self._plan_and_write(conn, request, state, answer, commit):
                raise _Busy("a record it names changed while it held the locks")
            commit.may_be_saved = True  # leaving the block sends COMMIT

    async def _plan_and_write(
        self,
        conn: asyncpg.Connection,
        request: Request,
        state: ReadState,
        answer: command_pb2.Answer | command_pb2.BatchAnswer,
        commit: _Commit,
    ) -> bool:
        """Diff against `state` and write; False when a record changed since `state` was read."""
        if state["previous_answer"] is not None:
            raise _Repeat
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
        medals = bool(plan.writes.medal_updates or plan.writes.medal_inserts)
        if medals and not conn.is_in_transaction():
            # The other rows' ranks follow from the counts just written, in the same commit.
            async with conn.transaction():
                result = await self._write_and_rank(conn, text, args, plan, state)
                commit.may_be_saved = bool(result["current"])  # leaving the block commits
        else:
            # Outside a transaction block the write is its own transaction: sending it commits.
            commit.may_be_saved = not conn.is_in_transaction()
            result = await self._write_and_rank(conn, text, args, plan, state, rank=medals)
        if not result["current"]:
            commit.may_be_saved = False  # it wrote nothing
            return False
        if not result["recorded"]:
            # Another copy of this command committed while we ran: its write stands.
            raise _Repeat
        return True

    @staticmethod
    async def _write_and_rank(
        conn: asyncpg.Connection,
        text: str,
        args: Sequence[Any],
        plan: Plan,
        state: ReadState,
        *,
        rank: bool = True,
    ) -> asyncpg.Record:
        """The write; after one to medal rows, every rank of the event's tables from the counts
        (a page run of a few NOCs must not leave the others' ranks as the last full run did)."""
        result = await conn.fetchrow(text, *args)
        if rank and result["current"] and result["recorded"]:
            await conn.execute(QUERIES["rank_medal_rows"], plan.event_id or state["event_id"])
        return result

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
        self,
        pool: asyncpg.Pool,
        request: Request,
        repeat: _Repeat,
        answer: _AnswerT,
        commit: _Commit,
    ) -> _AnswerT:
        """The first answer again, once the command's record is known to be on the standby
        too: the record is read in a transaction that takes a transaction id, so its COMMIT
        waits for the synchronous standby to have everything up to it, the found record
        included. A record on the primary alone is not yet a save (a failover may drop it)."""
        commit.may_be_saved = True
        async with self._connection(pool, commit) as conn, conn.transaction():
            row = await conn.fetchrow(QUERIES["confirmed_answer"], request.command_id)
        if commit.wait_cut is not None or row is None:
            # No word from the standby, or the record went with a failover: the resend decides.
            log.warning(
                "command %s: repeat not confirmed (%s)", request.command_id, commit.wait_cut
            )
            answer.command_id = request.command_id
            answer.outcome = command_pb2.OUTCOME_TRY_AGAIN
            answer.reason = _WAIT_CUT if row is not None else _NOT_CONFIRMED
            return answer
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
