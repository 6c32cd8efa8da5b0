"""A scorer's action taken: checked (`_checks`) against the match as last known (`_known`) or
read afresh, sent down the one road, and tried again when the match moved on meanwhile; an
answer lost on the way is found again as DUPLICATE once the standby has it."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import asyncpg
import grpc
from grpc import aio

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_db import is_outage
from omnium_grpc import command_message, is_id
from omnium_scoring._assigned import Assigned
from omnium_scoring._checks import (
    Outcome,
    act_answer,
    check_actor,
    client_id_problem,
    step,
    undo,
)
from omnium_scoring._confirm import NOT_CONFIRMED, on_standby
from omnium_scoring._known import KnownMatches
from omnium_scoring._matches import MatchReads
from omnium_scoring._sql import QUERIES
from omnium_settings import Settings
from omnium_sports import UNDO, ActionRefused, Sport

log = logging.getLogger(__name__)
DATABASE_OUT = (
    "Nothing was confirmed: the database did not answer (it may be restarting or failing "
    "over). The action is kept and sent again; it is saved once."
)


class Scorer:
    """The scoring service's work, apart from gRPC: one per process."""

    def __init__(
        self,
        settings: Settings,
        reader: asyncpg.Pool,
        command: command_pb2_grpc.CommandServiceStub,
        sports: Mapping[str, Sport],
        assigned: Assigned,
    ) -> None:
        self.settings = settings
        self.reader = reader
        self.command = command
        self.assigned = assigned
        self.reads = MatchReads(settings, reader, sports, assigned)
        self.known = KnownMatches(settings.scoring.match_cache_seconds)

    async def act(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor
    ) -> scoring_pb2.ActAnswer:
        actor, problem = check_actor(
            actor, sign_in_required=self.settings.scoring.scorer_sign_in_required
        )
        problem = problem or client_id_problem(action)
        if problem:
            return act_answer(action, Outcome.OUTCOME_REFUSED, problem)
        if not is_id(action.unit_id):
            return act_answer(action, Outcome.OUTCOME_REFUSED, "unit_id is not an id (a UUID)")
        try:
            not_yours = await self.assigned.problem(actor, action.unit_id)
            if not_yours is not None:
                return await self._not_yours(action, actor, not_yours)
            for attempt in range(max(1, self.settings.scoring.attempts)):
                answer, again = await self._attempt(action, actor, known=attempt == 0)
                if not again:
                    break
        except Exception as exc:
            if not is_outage(exc):
                raise
            # The database is restarting or failing over: an answer the console keeps the
            # action for and sends again, not an incident.
            self.known.forget(action.unit_id)
            log.warning(
                "action %s: try again, the database did not answer (%r)", action.client_id, exc
            )
            return act_answer(action, Outcome.OUTCOME_TRY_AGAIN, DATABASE_OUT)
        # After the last attempt: the road's own reason (the match kept moving, or a failover).
        return answer

    async def _not_yours(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor, reason: str
    ) -> scoring_pb2.ActAnswer:
        """Refused: not the scorer's match; recorded. An action saved before the match was
        handed over (its answer lost on the way) stays saved and answers DUPLICATE."""
        async with self.reader.acquire() as conn:
            seq = await conn.fetchval(QUERIES["seq_of_client"], action.client_id, action.unit_id)
            if seq is not None:
                return await self._duplicate(conn, action, seq)
        await self.assigned.record(actor, action, reason)
        log.info("action %s by %s refused: %s", action.client_id, actor.name, reason)
        return act_answer(action, Outcome.OUTCOME_REFUSED, reason)

    async def _attempt(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor, *, known: bool = False
    ) -> tuple[scoring_pb2.ActAnswer, bool]:
        """One read, check and send; True when the road said try again: read and check again.

        With `known`, the match as this process last saw it stands in for the read; when that
        does not end in a save, the action is checked again from a fresh read at once.
        """
        if known:
            fast = await self._check_known_and_send(action, actor)
            if fast is not None:
                return fast, False
        answer = await self._check_and_send(action, actor)
        if isinstance(answer, command_pb2.Answer):
            return act_answer(action, Outcome.OUTCOME_TRY_AGAIN, answer.reason), True
        return answer, False

    async def _check_known_and_send(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor
    ) -> scoring_pb2.ActAnswer | None:
        """The action checked against the known match and saved, or None: go the long way."""
        if action.kind == UNDO:
            return None  # Undo replays the saved actions: always from PostgreSQL.
        unit = self.known.get(action.unit_id)
        if unit is None:
            return None
        sport = self.reads.sport_of(unit["discipline"], unit["sport_file"])
        if sport is None:
            return None
        try:
            state, record = step(sport, unit, action)
        except ActionRefused:
            # Perhaps a copy of an action already saved (an answer lost on the way): the fresh
            # read says DUPLICATE where that is so, and the reason otherwise.
            return None
        answer = await self._send(action, actor, unit, sport, state, record)
        if isinstance(answer, scoring_pb2.ActAnswer):
            if answer.outcome != Outcome.OUTCOME_SAVED:
                self.known.forget(action.unit_id)  # The command service did not answer.
            return answer
        # Moved on elsewhere, a repeat, or refused by the road: drop the copy, read afresh.
        self.known.forget(action.unit_id)
        return None

    async def _check_and_send(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor
    ) -> scoring_pb2.ActAnswer | command_pb2.Answer:
        self.known.forget(action.unit_id)
        async with self.reader.acquire() as conn:
            unit = await conn.fetchrow(QUERIES["match"], action.unit_id, action.client_id)
            if unit is None:
                return act_answer(
                    action, Outcome.OUTCOME_REFUSED, f"there is no unit {action.unit_id}"
                )
            if unit["saved_seq"] is not None:
                return await self._duplicate(conn, action, unit["saved_seq"])
            sport = self.reads.sport_of(unit["discipline"], unit["sport_file"])
            if sport is None:
                return act_answer(
                    action,
                    Outcome.OUTCOME_REFUSED,
                    f"discipline {unit['discipline']} has no sport file: add one to sports/",
                )
            self.known.remember(unit)
            try:
                state, record = await self._next(conn, sport, unit, action)
            except ActionRefused as exc:
                return act_answer(action, Outcome.OUTCOME_REFUSED, str(exc))
        answer = await self._send(action, actor, unit, sport, state, record)
        # Try again: the match moved on while it was checked.
        if (
            isinstance(answer, scoring_pb2.ActAnswer)
            or answer.outcome != command_pb2.OUTCOME_REFUSED
        ):
            return answer
        return await self._refused(action, answer)

    async def _refused(
        self, action: scoring_pb2.Action, answer: command_pb2.Answer
    ) -> scoring_pb2.ActAnswer:
        """The road refused the action: a duplicate if its other copy was saved meanwhile."""
        async with self.reader.acquire() as conn:
            seq = await conn.fetchval(QUERIES["seq_of_client"], action.client_id, action.unit_id)
            if seq is not None:
                # The same action, sent twice at once: the other copy was saved.
                return await self._duplicate(conn, action, seq)
        return act_answer(action, Outcome.OUTCOME_REFUSED, answer.reason)

    async def _send(
        self,
        action: scoring_pb2.Action,
        actor: actor_pb2.Actor,
        unit: Mapping[str, Any],
        sport: Sport,
        state: dict[str, Any],
        record: dict[str, Any],
    ) -> scoring_pb2.ActAnswer | command_pb2.Answer:
        """Send the checked action down the road: SAVED, or the road's answer when it was not."""
        expected = unit["match_seq"]
        status = self.settings.scoring.finished_status if state["finished"] else "RUNNING"
        values = sport.side_values(state)
        sides = [{"result": None, "rank": None, **side} for side in values]
        # As text: a Struct of a whole match state costs more than the rest of the action.
        state_json = json.dumps(state, separators=(",", ":"))
        payload = {
            "expected_seq": expected,
            "action": record,
            "state_json": state_json,
            "status": status,
            "sides": sides,
        }
        command = command_message(
            action.client_id, "scoring.act", payload, actor, unit_id=action.unit_id
        )
        try:
            answer: command_pb2.Answer = await self.command.Submit(
                command, timeout=self.settings.grpc.deadline_seconds
            )
        except aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return act_answer(
                    action,
                    Outcome.OUTCOME_TRY_AGAIN,
                    "Nothing was confirmed: the command service did not answer. Send it again.",
                )
            raise
        if answer.outcome == command_pb2.OUTCOME_ACCEPTED:
            saved = act_answer(action, Outcome.OUTCOME_SAVED)
            saved.seq = expected + 1
            self.reads.match_state(
                unit,
                sport,
                state,
                expected + 1,
                full=False,
                status=status,
                into=saved.state,
                state_json=state_json,
                values=values,
            )
            self.known.remember(
                {**unit, "match_state": state, "match_seq": expected + 1, "status": status}
            )
            return saved
        if answer.outcome == command_pb2.OUTCOME_TRY_AGAIN:
            return answer
        # Refused, or a repeat (DUPLICATE): the caller looks up what was saved under the id.
        answer.outcome = command_pb2.OUTCOME_REFUSED
        return answer

    async def _next(
        self,
        conn: asyncpg.Connection,
        sport: Sport,
        unit: Mapping[str, Any],
        action: scoring_pb2.Action,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The state after the action, and the action as recorded."""
        if action.kind != UNDO:
            return step(sport, unit, action)
        rows = await conn.fetch(QUERIES["actions_after"], unit["id"], 0)
        return undo(sport, unit["side_count"], rows, action)

    async def _duplicate(
        self, conn: asyncpg.Connection, action: scoring_pb2.Action, seq: int
    ) -> scoring_pb2.ActAnswer:
        if not await on_standby(conn, action.client_id, self.settings):
            return act_answer(action, Outcome.OUTCOME_TRY_AGAIN, NOT_CONFIRMED)
        answer = act_answer(action, Outcome.OUTCOME_DUPLICATE, "saved before; nothing new written")
        answer.seq = seq
        state = await self.reads.get_state(action.unit_id, conn=conn, full=False)
        if state is not None:
            answer.state.CopyFrom(state)
        return answer

    async def sync(
        self, actions: list[scoring_pb2.Action], actor: actor_pb2.Actor
    ) -> scoring_pb2.SyncAnswer:
        out = scoring_pb2.SyncAnswer()
        if len(actions) > self.settings.scoring.sync_max_actions:
            reason = (
                f"{len(actions)} actions in one sync; at most "
                f"{self.settings.scoring.sync_max_actions} are taken. Send the first ones."
            )
            out.answers.extend(
                act_answer(a, Outcome.OUTCOME_TRY_AGAIN, reason) for a in actions[:1]
            )
            return out
        for action in actions:
            answer = await self.act(action, actor)
            out.answers.append(answer)
            if answer.outcome == Outcome.OUTCOME_TRY_AGAIN:
                break
        last = next((a.state for a in reversed(out.answers) if a.HasField("state")), None)
        if last is not None:
            out.state.CopyFrom(last)
        elif actions:
            try:
                state = await self.reads.get_state(actions[-1].unit_id, full=False)
            except Exception as exc:
                # The answers stand without the match: the console reads it again later.
                if not is_outage(exc):
                    raise
                state = None
            if state is not None:
                out.state.CopyFrom(state)
        return out
