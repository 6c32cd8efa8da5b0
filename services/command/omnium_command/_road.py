"""The one road: lock, check the command id, diff, write, log and confirm after the commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import asyncpg

from omnium.command.v1 import command_pb2
from omnium_command._intent import ReadKeys, Request
from omnium_command._parse import (
    Refusal,
    guess_batch_keys,
    guess_command_keys,
    parse_batch,
    parse_command,
)
from omnium_command._plan import Outcome, Plan, Planner, Stale, now_timestamp
from omnium_command._sql import QUERIES
from omnium_db import connection_lost, is_outage, not_connected
from omnium_grpc import field_changes
from omnium_settings import Settings

log = logging.getLogger(__name__)

Row = command_pb2.RowOutcome
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


# Every column of the read; those of the parts a command leaves out are None.
_NOTHING_READ: dict[str, Any] = dict.fromkeys(
    [
        "previous_answer",
        "previous_hash",
        "seq",
        "units",
        "sides",
        "competitors",
        "medal_rows",
        "known_competitors",
        "known_nocs",
        "disciplines",
        "integration_id",
        "run_integration_id",
        "run_status",
        "run_batch_done",
        "event_id",
    ]
)

_AnswerT = TypeVar("_AnswerT", command_pb2.Answer, command_pb2.BatchAnswer)


def _refs(state: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """How each record was named (id, code or medal row ref) -> its id, per kind."""
    refs: dict[str, dict[str, str]] = {"unit": {}, "competitor": {}, "medal_row": {}}
    for row in state["units"] or ():
        refs["unit"][row["id"]] = refs["unit"][row["code"]] = row["id"]
    for row in state["competitors"] or ():
        refs["competitor"][row["id"]] = refs["competitor"][row["code"]] = row["id"]
    for row in state["medal_rows"] or ():
        refs["medal_row"][row["ref"]] = row["id"]
    return refs


def _guard(rows: Any) -> tuple[list[str], list[int]]:
    """The ids read and the changed_seq each had: the write locks them and checks them."""
    rows = rows or ()
    return [row["id"] for row in rows], [row["changed_seq"] for row in rows]


_Units = tuple[list[Any], list[Any]]


def _written_units(state: Mapping[str, Any], plan: Plan) -> _Units:
    """The units read that the plan writes (the write locks them) and those it only read
    (the write checks they are unchanged since the read, without a lock)."""
    units = state["units"] or ()
    if not units:
        return [], []
    ids = {update["id"] for update in plan.writes.unit_updates}
    return (
        [row for row in units if row["id"] in ids],
        [row for row in units if row["id"] not in ids],
    )


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
            time_limit=self.settings.people_transaction_seconds,
        )

    async def apply_batch(self, message: command_pb2.ImportBatch) -> command_pb2.BatchAnswer:
        # No time limit of its own: the import road's statement and lock timeouts bound it.
        return await self._answer(
            command_pb2.BatchAnswer,
            message.command_id,
            self.imports,
            lambda: guess_batch_keys(message),
            lambda: parse_batch(message, max_units=self.settings.batch_max_units),
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
    ) -> tuple[Request, dict[str, Any] | None]:
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
        answer: Any,
        state: dict[str, Any] | None = None,
    ) -> None:
        # Two round trips when nobody else writes the same records, which is nearly always.
        if state is None:
            state = await self._read(conn, request)
        if await self._plan_and_write(conn, request, state, answer):
            return
        # Someone did: lock first, then read and write under the locks.
        async with conn.transaction():
            lock = QUERIES.statement("lock")
            await conn.fetchrow(
                lock.text,
                *lock.args(
                    {
                        "unit_ids": _guard(state["units"])[0],
                        "competitor_ids": _guard(state["competitors"])[0],
                        "medal_row_ids": _guard(state["medal_rows"])[0],
                    }
                ),
            )
            state = await self._read(conn, request)
            if not await self._plan_and_write(conn, request, state, answer):
                raise _Busy("a record it names changed while it held the locks")

    async def _plan_and_write(
        self, conn: asyncpg.Connection, request: Request, state: Mapping[str, Any], answer: Any
    ) -> bool:
        """Diff against `state` and write; False when a record changed since `state` was read."""
        if state["previous_answer"] is not None:
            raise _Repeat(state["previous_answer"], state["previous_hash"])
        run_batch_done = self._check_batch(request, state)
        plan = Planner(request, _refs(state), state).plan()
        answer.Clear()
        answer.command_id = request.command_id
        self._render(request, plan, state["seq"], answer, run_batch_done)
        if request.batch is not None and request.batch.dry_run:
            # What it would do, row by row, with the changes; nothing is written or recorded.
            by_position = {a.position: a for a in answer.rows}
            for intent, outcome in plan.outcomes:
                if intent.row is not None and intent.row.position in by_position:
                    by_position[intent.row.position].changes.extend(field_changes(outcome.changes))
            return True
        stored = answer.SerializeToString()
        if request.batch is not None:
            self._batch_rows(request, plan)
        units = _written_units(state, plan)
        write = QUERIES.compose("write", self._write_parts(request, plan, state, units))
        result = await conn.fetchrow(
            write.text, *write.args(self._write_args(request, plan, state, units, stored))
        )
        if not result["current"]:
            return False
        if not result["recorded"]:
            # Another copy of this command committed while we ran: its write stands.
            raise _Repeat(None, None)
        return True

    async def _read(self, conn: asyncpg.Connection, request: Request) -> dict[str, Any]:
        return await self._fetch_read(conn, request.read_keys())

    @staticmethod
    async def _fetch_read(conn: asyncpg.Connection, keys: ReadKeys) -> dict[str, Any]:
        read = QUERIES.compose("read", keys.parts())
        found = await conn.fetchrow(read.text, *read.args(keys.args()))
        return _NOTHING_READ | dict(found.items())

    def _check_batch(self, request: Request, state: Mapping[str, Any]) -> int:
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
        done: int = state["run_batch_done"]
        return done

    def _render(
        self, request: Request, plan: Plan, seq: int, answer: Any, run_batch_done: int
    ) -> None:
        answer.outcome = command_pb2.OUTCOME_ACCEPTED
        if plan.changed:
            answer.seq = seq
        if isinstance(answer, command_pb2.Answer):
            changes = [d for d in plan.writes.diff if not d.get("kept_by_hand")]
            kept = [d for d in plan.writes.diff if d.get("kept_by_hand")]
            answer.changes.extend(field_changes(changes))
            answer.kept_by_hand.extend(field_changes(kept))
            answer.saved_at.CopyFrom(now_timestamp())
            return
        # Built in place, in position order: extending from separate messages copies each one.
        rows: list[tuple[int, Any]] = [
            (position, (key, reason))
            for position, (key, _hash, reason) in request.refused_rows.items()
        ]
        for intent, outcome in plan.outcomes:
            assert intent.row is not None
            rows.append((intent.row.position, (intent, outcome)))
        rows.sort(key=lambda r: r[0])
        add = answer.rows.add
        for position, item in rows:
            if isinstance(item[1], Outcome):
                intent, outcome = item
                add(
                    position=position,
                    key=intent.row.key,
                    outcome=outcome.row_outcome,
                    reason=outcome.reason,
                    subject_id=outcome.subject_id or "",
                    changed_fields=[c["field"] for c in outcome.changes],
                    kept_by_hand=[k["field"] for k in outcome.kept],
                    applied_seq=outcome.applied_seq or 0,
                )
            else:
                key, reason = item
                add(
                    position=position,
                    key=key,
                    outcome=command_pb2.ROW_OUTCOME_REFUSED,
                    reason=reason,
                )
        answer.batch_done = run_batch_done + 1

    @staticmethod
    def _write_parts(
        request: Request, plan: Plan, state: Mapping[str, Any], units: _Units
    ) -> list[str]:
        """The parts of the write this command has something for."""
        writes = plan.writes
        written, only_read = units
        parts = [
            name
            for name, present in (
                ("unit_locks", written),
                ("unit_checks", only_read),
                ("competitor_locks", state["competitors"]),
                ("medal_locks", state["medal_rows"]),
                ("unit_inserts", writes.unit_inserts),
                ("unit_updates", writes.unit_updates),
                ("side_updates", writes.side_updates),
                ("side_inserts", writes.side_inserts),
                ("medal_updates", writes.medal_updates),
                ("medal_inserts", writes.medal_inserts),
                ("competitor_updates", writes.competitor_updates),
                ("outbox", writes.outbox),
                ("key_states", writes.key_states),
                ("row_log", writes.row_log),
                ("match_actions", writes.match_actions),
            )
            if present
        ]
        if any(action.get("undoes") for action in writes.match_actions):
            parts.append("match_undos")
        if request.batch is not None:
            parts.append("run")
        return parts

    def _write_args(
        self,
        request: Request,
        plan: Plan,
        state: Mapping[str, Any],
        units: _Units,
        stored: bytes,
    ) -> dict[str, Any]:
        writes = plan.writes
        written, only_read = units
        actor = request.actor
        timeline = {
            "event_id": plan.event_id or state["event_id"],
            "subject_kind": request.subject_kind,
            "subject_id": request.batch.run_id if request.batch else plan.subject_id,
            "unit_ids": writes.unit_ids,
            "actor_kind": request.actor_kind,
            "actor_name": actor.name,
            "source_code": actor.source_code or None,
            "screen": actor.screen or None,
            "payload": request.payload,
            "diff": writes.diff,
        }
        batch = request.batch
        locked_unit_ids, locked_unit_seqs = _guard(written)
        checked_unit_ids, checked_unit_seqs = _guard(only_read)
        competitor_ids, competitor_seqs = _guard(state["competitors"])
        medal_row_ids, medal_row_seqs = _guard(state["medal_rows"])
        # The key states as columns: key, kind, subject id, hash, applied_seq.
        key_states = [list(column) for column in zip(*writes.key_states, strict=True)]
        keys, kinds, subject_ids, hashes, applied_seqs = key_states or ([], [], [], [], [])
        return {
            "seq": state["seq"],
            "command_id": request.command_id,
            "code": request.code,
            "source_code": actor.source_code or None,
            "request_hash": request.request_hash,
            "answer": stored,
            "timeline": timeline,
            "locked_unit_ids": locked_unit_ids,
            "locked_unit_seqs": locked_unit_seqs,
            "checked_unit_ids": checked_unit_ids,
            "checked_unit_seqs": checked_unit_seqs,
            "competitor_ids": competitor_ids,
            "competitor_seqs": competitor_seqs,
            "medal_row_ids": medal_row_ids,
            "medal_row_seqs": medal_row_seqs,
            "unit_inserts": writes.unit_inserts,
            "unit_updates": writes.unit_updates,
            "side_updates": writes.side_updates,
            "side_inserts": writes.side_inserts,
            "medal_updates": writes.medal_updates,
            "medal_inserts": writes.medal_inserts,
            "competitor_updates": writes.competitor_updates,
            "outbox": writes.outbox,
            "match_actions": writes.match_actions,
            "integration_id": state["integration_id"],
            "run_id": batch.run_id if batch else None,
            "batch_no": batch.batch_no if batch else None,
            "row_log": writes.row_log,
            "key_state_keys": keys,
            "key_state_kinds": kinds,
            "key_state_subject_ids": subject_ids,
            "key_state_hashes": hashes,
            "key_state_applied_seqs": applied_seqs,
        }

    def _batch_rows(self, request: Request, plan: Plan) -> None:
        writes = plan.writes
        for position, (key, row_hash, reason) in request.refused_rows.items():
            writes.key_states.append((key, "unknown", None, None, None))
            writes.row_log.append(
                {
                    "position": position,
                    "key": key,
                    "kind": "unknown",
                    "subject_id": None,
                    "hash": row_hash.hex(),
                    "outcome": "refused",
                    "reason": reason,
                }
            )
        for intent, outcome in plan.outcomes:
            row = intent.row
            assert row is not None
            placed = outcome.row_outcome in (
                command_pb2.ROW_OUTCOME_ACCEPTED,
                command_pb2.ROW_OUTCOME_UNCHANGED,
                command_pb2.ROW_OUTCOME_KEPT_BY_HAND,
            )
            writes.key_states.append(
                (
                    row.key,
                    intent.kind,
                    outcome.subject_id,
                    row.hash if placed else None,
                    outcome.applied_seq if placed else None,
                )
            )
            if outcome.row_outcome != command_pb2.ROW_OUTCOME_UNCHANGED:
                writes.row_log.append(
                    {
                        "position": row.position,
                        "key": row.key,
                        "kind": intent.kind,
                        "subject_id": outcome.subject_id,
                        "hash": row.hash.hex(),
                        "outcome": Row.Name(outcome.row_outcome)
                        .removeprefix("ROW_OUTCOME_")
                        .lower(),
                        "reason": outcome.reason or None,
                        "diff": outcome.changes,
                        "kept": outcome.kept,
                    }
                )

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
