"""The scoring process: sport files, pools, the command client, the gRPC server, a clean stop."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncpg
from grpc import aio

from omnium.command.v1 import command_pb2_grpc
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_accounts import CallSessions
from omnium_db import PoolRoad, create_pool, require_schema
from omnium_grpc import GrpcServer, open_channel
from omnium_scoring._assigned import Assigned
from omnium_scoring._providers import PROVIDERS_DIR, Providers
from omnium_scoring._scorer import Scorer
from omnium_scoring._service import ScoringService
from omnium_scoring._watchers import Watchers
from omnium_settings import Settings
from omnium_sports import SPORTS_DIR, load_sports

log = logging.getLogger(__name__)
SERVICE_NAME = scoring_pb2.DESCRIPTOR.services_by_name["ScoringService"].full_name


class ScoringApp:
    """Everything one scoring process holds. `start(port)`, then `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pools: list[asyncpg.Pool] = []
        self.server: GrpcServer | None = None
        self.channel: aio.Channel | None = None
        self.watchers = Watchers()
        self.scorer: Scorer | None = None
        self.providers: Providers | None = None
        self.assigned: Assigned | None = None

    async def prepare(self) -> Providers:
        """Sports, pools, the command client and the providers: all but the gRPC server."""
        settings = self.settings
        # A bad sport file stops the start, with the file, line and field in the message.
        sports = load_sports(Path(settings.scoring.sports_dir or SPORTS_DIR))
        log.info("sports: %s", ", ".join(sorted(sports)))
        reader = await create_pool(settings, PoolRoad.READER, application_name="scoring")
        self.pools.append(reader)
        await require_schema(reader, "scoring", settings.database.schema_ahead_allowed)
        writer = await create_pool(settings, PoolRoad.PEOPLE, application_name="scoring", size=4)
        self.pools.append(writer)
        self.channel = open_channel(settings.command.address, settings)
        self.assigned = Assigned(settings, reader, writer)
        self.scorer = Scorer(
            settings,
            reader,
            command_pb2_grpc.CommandServiceStub(self.channel),
            sports,
            self.assigned,
        )
        self.providers = Providers(settings, writer, self.scorer)
        registered = await self.providers.register_folder(
            Path(settings.scoring.providers_dir or PROVIDERS_DIR)
        )
        if registered:
            log.info("providers: %s", ", ".join(registered))
        return self.providers

    async def start(self, port: int | None = None) -> int:
        settings = self.settings
        providers = await self.prepare()
        assert self.scorer is not None
        await self.watchers.start(settings, self.assigned)
        self.server = GrpcServer(settings, name="scoring")
        assert self.scorer is not None
        # The consoles' calls name their person only through the person's session.
        self.server.use_sessions(CallSessions(self.scorer.reader, settings))
        self.server.add(
            scoring_pb2_grpc.add_ScoringServiceServicer_to_server,
            ScoringService(settings, self.scorer, providers, self.watchers),
            SERVICE_NAME,
        )
        return await self.server.start(settings.scoring.port if port is None else port)

    async def stop(self, grace: float | None = None) -> None:
        if self.server is not None:
            await self.server.stop(grace)
        await self.watchers.stop()
        if self.channel is not None:
            await self.channel.close()
        for pool in reversed(self.pools):
            await pool.close()
        self.pools.clear()
