"""Check one action against the sport's rules and the match state, then send it down the road."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping
from datetime import UTC
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from google.protobuf import json_format, struct_pb2
from grpc import aio

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_db import is_outage
from omnium_grpc import actor_as_sent, command_message, is_id
from omnium_scoring._assigned import Assigned
from omnium_scoring._confirm import NOT_CONFIRMED, on_standby
from omnium_scoring._sql import QUERIES
from omnium_settings import Settings
from omnium_sports import UNDO, ActionRefused, Sport, sport_for_discipline

log = logging.getLogger(__name__)
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:@/-]{1,200}$")
Outcome = scoring_pb2.Outcome
DATABASE_OUT = (
    "Nothing was confirmed: the database did not answer (it may be restarting or failing "
    "over). The action is kept and sent again; it is saved once."
)


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    json_format.ParseDict(dict(value), struct)
    return struct


def _plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(struct)


# What a known match keeps of the `match` row: all but the client id's saved seq.
_KNOWN_FIELDS = (
    "id",
    "code",
    "name",
    "status",
    "match_state",
    "match_seq",
    "discipline",
    "sport_file",
    "side_count",
    "side_names",
)


def _record(action: scoring_pb2.Action) -> dict[str, Any]:
    """The action as recorded, with "at" (seconds by the device's clock; 0 when unknown)."""
    record: dict[str, Any] = {"kind": action.kind, "at": 0.0}
    if action.HasField("client_at"):
        tapped = action.client_at.ToDatetime(tzinfo=UTC)
        record["client_at"] = tapped.isoformat()
        record["at"] = tapped.timestamp()
    return record


def _answer(action: scoring_pb2.Action, outcome: int, reason: str = "") -> scoring_pb2.ActAnswer:
    return scoring_pb2.ActAnswer(client_id=action.client_id, outcome=outcome, reason=reason)  # type: ignore[arg-type]


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
        self.sports = sports
        self.assigned = assigned
        # What the console draws its buttons from: built once per sport, not per answer.
        self._described = {code: _struct(sport.describe()) for code, sport in sports.items()}
        # Each match as this process last read or saved it, by unit id: the next action is
        # checked against it without reading PostgreSQL. Only a hint: the road takes the action
        # only if the match is still at that match_seq, and anything but a clean save goes the
        # long way (a fresh read), so a stale copy costs one retry, never a wrong write.
        self._known: dict[str, tuple[float, dict[str, Any]]] = {}
        self._prune_at = 0.0

    # -- which sport ----------------------------------------------------------------------

    def sport_of(self, discipline: str, sport_file: str | None) -> Sport | None:
        if sport_file:
            return self.sports.get(Path(sport_file).stem)
        return sport_for_discipline(self.sports, discipline)

    # -- acting ---------------------------------------------------------------------------

    def check_actor(self, actor: actor_pb2.Actor) -> tuple[actor_pb2.Actor, str | None]:
        """The actor to record, or the reason the action cannot be taken from this sender."""
        out = actor_as_sent(actor, "scorer")
        if out.kind == actor_pb2.Actor.KIND_SCORER and not out.source_code:
            if self.settings.scoring.scorer_sign_in_required:
                return out, "sign in first: every action records the account that sent it"
            out.name = out.name or "scorer (not signed in)"
        if not out.name:
            return out, "actor.name is empty: every action says who sent it"
        if not out.screen:
            return out, "actor.screen is empty: say which screen or app the action came from"
        return out, None

    async def act(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor
    ) -> scoring_pb2.ActAnswer:
        actor, problem = self.check_actor(actor)
        if problem:
            return _answer(action, Outcome.OUTCOME_REFUSED, problem)
        if not _CLIENT_ID.match(action.client_id):
            return _answer(
                action,
                Outcome.OUTCOME_REFUSED,
                "the action has no usable client id: 1 to 200 letters, digits or . _ : @ / -",
            )
        if not is_id(action.unit_id):
            return _answer(action, Outcome.OUTCOME_REFUSED, "unit_id is not an id (a UUID)")
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
            self._forget(action.unit_id)
            log.warning(
                "action %s: try again, the database did not answer (%r)", action.client_id, exc
            )
            return _answer(action, Outcome.OUTCOME_TRY_AGAIN, DATABASE_OUT)
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
        return _answer(action, Outcome.OUTCOME_REFUSED, reason)

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
            return _answer(action, Outcome.OUTCOME_TRY_AGAIN, answer.reason), True
        return answer, False

    # -- the matches this process knows ----------------------------------------------------

    def _known_match(self, unit_id: str) -> dict[str, Any] | None:
        hit = self._known.get(unit_id)
        if hit is None or hit[0] <= time.monotonic():
            return None
        return hit[1]

    def _remember(self, unit: Mapping[str, Any]) -> None:
        """Keep a match as read or saved; an older copy (a slower reader) never replaces a newer."""
        seconds = self.settings.scoring.match_cache_seconds
        if seconds <= 0:
            return
        now = time.monotonic()
        if now >= self._prune_at:
            self._known = {k: hit for k, hit in self._known.items() if hit[0] > now}
            self._prune_at = now + seconds
        kept = self._known.get(unit["id"])
        if kept is not None and kept[0] > now and kept[1]["match_seq"] > unit["match_seq"]:
            return
        copy = {k: unit[k] for k in _KNOWN_FIELDS}
        self._known[copy["id"]] = (now + seconds, copy)

    def _forget(self, unit_id: str) -> None:
        self._known.pop(unit_id, None)

    async def _check_known_and_send(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor
    ) -> scoring_pb2.ActAnswer | None:
        """The action checked against the known match and saved, or None: go the long way."""
        if action.kind == UNDO:
            return None  # Undo replays the saved actions: always from PostgreSQL.
        unit = self._known_match(action.unit_id)
        if unit is None:
            return None
        sport = self.sport_of(unit["discipline"], unit["sport_file"])
        if sport is None:
            return None
        try:
            state, record = self._step(sport, unit, action)
        except ActionRefused:
            # Perhaps a copy of an action already saved (an answer lost on the way): the fresh
            # read says DUPLICATE where that is so, and the reason otherwise.
            return None
        answer = await self._send(action, actor, unit, sport, state, record)
        if isinstance(answer, scoring_pb2.ActAnswer):
            if answer.outcome != Outcome.OUTCOME_SAVED:
                self._forget(action.unit_id)  # The command service did not answer.
            return answer
        # Moved on elsewhere, a repeat, or refused by the road: drop the copy, read afresh.
        self._forget(action.unit_id)
        return None

    async def _check_and_send(
        self, action: scoring_pb2.Action, actor: actor_pb2.Actor
    ) -> scoring_pb2.ActAnswer | command_pb2.Answer:
        self._forget(action.unit_id)
        async with self.reader.acquire() as conn:
            unit = await conn.fetchrow(QUERIES["match"], action.unit_id, action.client_id)
            if unit is None:
                return _answer(
                    action, Outcome.OUTCOME_REFUSED, f"there is no unit {action.unit_id}"
                )
            if unit["saved_seq"] is not None:
                return await self._duplicate(conn, action, unit["saved_seq"])
            sport = self.sport_of(unit["discipline"], unit["sport_file"])
            if sport is None:
                return _answer(
                    action,
                    Outcome.OUTCOME_REFUSED,
                    f"discipline {unit['discipline']} has no sport file: add one to sports/",
                )
            self._remember(unit)
            try:
                state, record = await self._next(conn, sport, unit, action)
            except ActionRefused as exc:
                return _answer(action, Outcome.OUTCOME_REFUSED, str(exc))
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
        return _answer(action, Outcome.OUTCOME_REFUSED, answer.reason)

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
                return _answer(
                    action,
                    Outcome.OUTCOME_TRY_AGAIN,
                    "Nothing was confirmed: the command service did not answer. Send it again.",
                )
            raise
        if answer.outcome == command_pb2.OUTCOME_ACCEPTED:
            saved = _answer(action, Outcome.OUTCOME_SAVED)
            saved.seq = expected + 1
            self.match_state(
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
            self._remember(
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
            return self._step(sport, unit, action)
        sides = unit["side_count"]
        record = _record(action)
        del record["at"]
        rows = await conn.fetch(QUERIES["actions_after"], unit["id"], 0)
        standing = [r for r in rows if r["kind"] != UNDO and r["undone_by"] is None]
        if not standing:
            raise ActionRefused("there is nothing to undo in this match")
        target = action.undo_seq or standing[-1]["seq"]
        by_seq = {r["seq"]: r for r in rows}
        if target not in by_seq:
            raise ActionRefused(f"there is no action {target} in this match")
        if by_seq[target]["kind"] == UNDO:
            raise ActionRefused("an undo cannot be undone: score the action again")
        if by_seq[target]["undone_by"] is not None:
            raise ActionRefused(f"action {target} was already undone")
        replayed = sport.new_state(sides)
        for row in standing:
            if row["seq"] == target:
                continue
            try:
                tapped = row["client_at"]
                replayed = sport.apply(
                    replayed,
                    {
                        "kind": row["kind"],
                        "side": row["side"],
                        "fields": row["fields"],
                        "at": tapped.timestamp() if tapped is not None else 0.0,
                    },
                )
            except ActionRefused as exc:
                raise ActionRefused(
                    f"undoing action {target} would make action {row['seq']} ({row['kind']}) "
                    f"impossible: {exc}. Undo the later actions first."
                ) from None
        record.update(undoes=target, fields={"seq": target})
        return replayed, record

    def _step(
        self, sport: Sport, unit: Mapping[str, Any], action: scoring_pb2.Action
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The state after an action that is not an undo, and the action as recorded."""
        record = _record(action)
        fields = _plain(action.fields)
        record.update(side=action.side or None, fields=fields)
        state = unit["match_state"] or sport.new_state(unit["side_count"])
        step = {
            "kind": action.kind,
            "side": action.side or None,
            "fields": fields,
            "at": record.pop("at"),
        }
        return sport.apply(state, step), record

    async def _duplicate(
        self, conn: asyncpg.Connection, action: scoring_pb2.Action, seq: int
    ) -> scoring_pb2.ActAnswer:
        if not await on_standby(conn, action.client_id, self.settings):
            return _answer(action, Outcome.OUTCOME_TRY_AGAIN, NOT_CONFIRMED)
        answer = _answer(action, Outcome.OUTCOME_DUPLICATE, "saved before; nothing new written")
        answer.seq = seq
        state = await self.get_state(action.unit_id, conn=conn, full=False)
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
            out.answers.extend(_answer(a, Outcome.OUTCOME_TRY_AGAIN, reason) for a in actions[:1])
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
                state = await self.get_state(actions[-1].unit_id, full=False)
            except Exception as exc:
                # The answers stand without the match: the console reads it again later.
                if not is_outage(exc):
                    raise
                state = None
            if state is not None:
                out.state.CopyFrom(state)
        return out

    # -- reading --------------------------------------------------------------------------

    def match_state(
        self,
        unit: Mapping[str, Any],
        sport: Sport | None,
        state: Mapping[str, Any] | None,
        seq: int,
        *,
        full: bool = True,
        status: str | None = None,
        into: scoring_pb2.MatchState | None = None,
        state_json: str | None = None,
        values: list[dict[str, Any]] | None = None,
    ) -> scoring_pb2.MatchState:
        """The match as a scorer sees it; `full` adds the sport's buttons and rules.

        Written `into` a message when given; `state_json` and `values` (the sport's side
        values) when the caller has them already.
        """
        out = scoring_pb2.MatchState() if into is None else into
        out.unit_id = unit["id"]
        out.unit_code = unit["code"]
        out.name = unit["name"]
        out.status = status or unit["status"]
        out.seq = seq
        names = {r[0]: r for r in unit["side_names"] or ()}
        if sport is not None:
            out.sport = sport.code
            if full:
                out.sport_actions.CopyFrom(self._described[sport.code])
            if state is None:
                state = sport.new_state(unit["side_count"] or 2)
            out.state_json = state_json or json.dumps(state, separators=(",", ":"))
            out.finished = bool(state.get("finished"))
            out.winner = int(state.get("winner") or 0)
            if values is None:
                values = sport.side_values(state)
            # As Sport.summary has it, without working the scores out again.
            out.summary = " - ".join(str(v["score"]) for v in values)
            for side in values:
                row = names.get(side["order"])
                out.sides.append(
                    scoring_pb2.SideScore(
                        order=side["order"],
                        name=(row[1] or "") if row else "",
                        noc=(row[2] or "") if row else "",
                        score=str(side.get("score") or ""),
                        result=str(side.get("result") or ""),
                        rank=int(side.get("rank") or 0),
                    )
                )
        return out

    async def get_state(
        self,
        unit_id: str,
        *,
        recent: int = 0,
        standing: bool = False,
        standing_after: int = 0,
        conn: asyncpg.Connection | None = None,
        full: bool = True,
    ) -> scoring_pb2.MatchState | None:
        if conn is None:
            async with self.reader.acquire() as own:
                return await self.get_state(
                    unit_id,
                    recent=recent,
                    standing=standing,
                    standing_after=standing_after,
                    conn=own,
                    full=full,
                )
        if not is_id(unit_id):
            return None
        unit = await conn.fetchrow(QUERIES["match"], unit_id, "")
        if unit is None:
            return None
        sport = self.sport_of(unit["discipline"], unit["sport_file"])
        out = self.match_state(unit, sport, unit["match_state"], unit["match_seq"], full=full)
        if recent > 0:
            for row in await conn.fetch(QUERIES["recent"], unit_id, recent):
                saved = scoring_pb2.SavedAction(
                    seq=row["seq"],
                    kind=row["kind"],
                    side=row["side"] or 0,
                    undoes=row["undoes"] or 0,
                    undone_by=row["undone_by"] or 0,
                    actor_name=row["actor_name"],
                    screen=row["screen"] or "",
                )
                saved.fields.CopyFrom(_struct(row["fields"] or {}))
                saved.saved_at.FromDatetime(row["saved_at"])
                out.recent.append(saved)
        if standing:
            # What an undo replays (see _next): every action not an undo and not undone; or,
            # for a copy of an earlier seq, what changed since.
            after = standing_after if 0 < standing_after <= out.seq else 0
            out.standing_after = after
            for row in await conn.fetch(QUERIES["actions_after"], unit_id, after):
                if row["kind"] == UNDO:
                    if row["undoes"] is not None and row["undoes"] <= after:
                        out.undone_since.append(row["undoes"])
                    continue
                if row["undone_by"] is not None:
                    continue
                saved = scoring_pb2.SavedAction(
                    seq=row["seq"], kind=row["kind"], side=row["side"] or 0
                )
                saved.fields.CopyFrom(_struct(row["fields"] or {}))
                if row["client_at"] is not None:
                    saved.client_at.FromDatetime(row["client_at"])
                out.standing.append(saved)
        return out

    async def list_matches(
        self, event_code: str, limit: int, actor: actor_pb2.Actor | None = None
    ) -> scoring_pb2.ListMatchesResponse:
        limit = min(limit or self.settings.scoring.list_limit, self.settings.scoring.list_limit)
        out = scoring_pb2.ListMatchesResponse()
        # No actor: every match (a caller that is not a scorer, as before).
        whose = self.assigned.listing(actor or actor_pb2.Actor())
        listed = QUERIES.statement("list_matches")
        async with self.reader.acquire() as conn:
            rows = await conn.fetch(
                listed.text, *listed.args({"event_code": event_code, "limit": limit, **whose})
            )
        for row in rows:
            sport = self.sport_of(row["discipline"], row["sport_file"])
            if sport is None:
                continue
            item = scoring_pb2.MatchListItem(
                unit_id=row["id"],
                unit_code=row["code"],
                name=row["name"],
                status=row["status"],
                sport=sport.code,
            )
            if row["start_at"] is not None:
                item.start_at.FromDatetime(row["start_at"])
            if row["match_state"]:
                item.summary = sport.summary(row["match_state"])
            out.matches.append(item)
        return out
