"""The ScoringService gRPC servicer: Act, Sync, GetMatchState, WatchMatch, provider pushes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc import aio

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_grpc import current_caller, held_results_hidden
from omnium_scoring._providers import Providers
from omnium_scoring._scorer import Scorer
from omnium_scoring._sql import QUERIES
from omnium_scoring._watchers import Watchers
from omnium_settings import Settings

log = logging.getLogger(__name__)
SCORER = actor_pb2.Actor.KIND_SCORER


def _recorded(actor: actor_pb2.Actor) -> actor_pb2.Actor:
    """The sender to record: as sent when the caller's role may name it, else the caller."""
    caller = current_caller()
    return actor if caller is None else caller.recorded(actor)


def _withheld(state: scoring_pb2.MatchState, approved: Any) -> scoring_pb2.MatchState:
    """A held match as another team may see it: who plays and its status, and its sides'
    results only as a person last approved them (none before the first approval)."""
    sides = {int(side.get("order") or 0): side for side in (approved or {}).get("sides") or ()}
    shown = scoring_pb2.MatchState(
        unit_id=state.unit_id,
        unit_code=state.unit_code,
        name=state.name,
        status=state.status,
        sport=state.sport,
        seq=state.seq,
    )
    if state.HasField("sport_actions"):
        shown.sport_actions.CopyFrom(state.sport_actions)
    for side in state.sides:
        mark = sides.get(side.order, {})
        shown.sides.append(
            scoring_pb2.SideScore(
                order=side.order,
                name=side.name,
                noc=side.noc,
                score=str(mark.get("score") or ""),
                result=str(mark.get("result") or ""),
                rank=int(mark.get("rank") or 0),
            )
        )
    return shown


class ScoringService(scoring_pb2_grpc.ScoringServiceServicer):
    def __init__(
        self, settings: Settings, scorer: Scorer, providers: Providers, watchers: Watchers
    ) -> None:
        self.settings = settings
        self.scorer = scorer
        self.providers = providers
        self.watchers = watchers

    async def Act(
        self, request: scoring_pb2.ActRequest, context: aio.ServicerContext
    ) -> scoring_pb2.ActAnswer:
        return await self.scorer.act(request.action, _recorded(request.actor))

    async def Sync(
        self, request: scoring_pb2.SyncRequest, context: aio.ServicerContext
    ) -> scoring_pb2.SyncAnswer:
        return await self.scorer.sync(list(request.actions), _recorded(request.actor))

    async def GetMatchState(
        self, request: scoring_pb2.GetMatchStateRequest, context: aio.ServicerContext
    ) -> scoring_pb2.MatchState:
        return await self._state(request, context)

    async def _state(
        self, request: scoring_pb2.GetMatchStateRequest, context: aio.ServicerContext
    ) -> scoring_pb2.MatchState:
        """The match as asked for; NOT_FOUND for no such unit, UNAVAILABLE in an outage."""
        caller = current_caller()
        if caller is not None and caller.role.people and SCORER in caller.role.names:
            # The scorer console reads for its signed-in scorer: only the matches they score.
            reader = caller.acting(actor_pb2.Actor(kind=SCORER))
            refusal = await self.scorer.assigned.read_problem(reader, request.unit_id)
            if refusal is not None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
        state = await self.scorer.reads.get_state(
            request.unit_id,
            recent=request.recent,
            standing=request.standing,
            standing_after=request.standing_after,
        )
        if state is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"there is no unit {request.unit_id}")
        assert state is not None
        if held_results_hidden():
            held = await self._held([state.unit_id])
            if state.unit_id in held:
                return _withheld(state, held[state.unit_id])
        return state

    async def _held(self, unit_ids: list[str]) -> dict[str, Any]:
        """Of these units, those whose results the checker holds, with their newest approval:
        another team's reader or feed sees none of their results before a person approves
        them."""
        held = [d.upper() for d in self.settings.delivery.checker_disciplines]
        rows = await self.scorer.reader.fetch(QUERIES["held_matches"], unit_ids, held)
        return {row["id"]: row["approved"] for row in rows}

    async def WatchMatch(
        self, request: scoring_pb2.GetMatchStateRequest, context: aio.ServicerContext
    ) -> AsyncIterator[scoring_pb2.MatchState]:
        after = request.after_seq
        first = True
        while True:
            # The stream ends UNAVAILABLE in an outage; a watcher opens it again.
            state = await self._state(request, context)
            if state.seq > after or (first and after == 0):
                after = state.seq
                yield state
            first = False
            await self.watchers.wait(self.settings.scoring.watch_poll_seconds)

    async def ListMatches(
        self, request: scoring_pb2.ListMatchesRequest, context: aio.ServicerContext
    ) -> scoring_pb2.ListMatchesResponse:
        listing = await self.scorer.reads.list_matches(
            request.event_code,
            request.limit,
            request.actor if request.HasField("actor") else None,
        )
        if held_results_hidden() and listing.matches:
            held = await self._held([m.unit_id for m in listing.matches])
            for match in listing.matches:
                if match.unit_id in held:
                    # The summary is the score as saved: held until a person approves it.
                    match.summary = ""
                    del match.sides[:]
        return listing

    async def ReceiveProviderMessage(
        self, request: scoring_pb2.ProviderMessage, context: aio.ServicerContext
    ) -> scoring_pb2.ProviderAnswer:
        return await self.providers.receive(
            request.provider, request.api_key, request.content_type, request.body
        )
