"""The ScoringService gRPC servicer: Act, Sync, GetMatchState, WatchMatch, provider pushes."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import grpc
from grpc import aio

from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_scoring._providers import Providers
from omnium_scoring._scorer import Scorer, Watchers
from omnium_settings import Settings

log = logging.getLogger(__name__)


async def _internal(context: aio.ServicerContext, what: str, exc: BaseException) -> None:
    incident = uuid.uuid4().hex[:12]
    log.exception("%s failed (incident %s)", what, incident, exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL,
        f"{what} failed on our side and nothing was confirmed; incident {incident} is logged. "
        "Send it again; if it fails again, tell the omnium team the incident number.",
    )


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
        try:
            return await self.scorer.act(request.action, request.actor)
        except Exception as exc:
            await _internal(context, f"action {request.action.client_id}", exc)
            raise

    async def Sync(
        self, request: scoring_pb2.SyncRequest, context: aio.ServicerContext
    ) -> scoring_pb2.SyncAnswer:
        try:
            return await self.scorer.sync(list(request.actions), request.actor)
        except Exception as exc:
            await _internal(context, "sync", exc)
            raise

    async def GetMatchState(
        self, request: scoring_pb2.GetMatchStateRequest, context: aio.ServicerContext
    ) -> scoring_pb2.MatchState:
        state = await self.scorer.get_state(request.unit_id, recent=request.recent)
        if state is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"there is no unit {request.unit_id}")
        assert state is not None
        return state

    async def WatchMatch(
        self, request: scoring_pb2.GetMatchStateRequest, context: aio.ServicerContext
    ) -> AsyncIterator[scoring_pb2.MatchState]:
        after = request.after_seq
        first = True
        while True:
            state = await self.scorer.get_state(request.unit_id, recent=request.recent)
            if state is None:
                await context.abort(
                    grpc.StatusCode.NOT_FOUND, f"there is no unit {request.unit_id}"
                )
                return
            if state.seq > after or (first and after == 0):
                after = state.seq
                yield state
            first = False
            await self.watchers.wait(self.settings.scoring_watch_poll_seconds)

    async def ListMatches(
        self, request: scoring_pb2.ListMatchesRequest, context: aio.ServicerContext
    ) -> scoring_pb2.ListMatchesResponse:
        return await self.scorer.list_matches(request.event_code, request.limit)

    async def ReceiveProviderMessage(
        self, request: scoring_pb2.ProviderMessage, context: aio.ServicerContext
    ) -> scoring_pb2.ProviderAnswer:
        try:
            return await self.providers.receive(
                request.provider, request.api_key, request.content_type, request.body
            )
        except Exception as exc:
            await _internal(context, f"provider message from {request.provider}", exc)
            raise
