"""The command process: pools, the schema check, the gRPC server, and a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_accounts import CallSessions
from omnium_command._road import Road
from omnium_command._service import CommandService
from omnium_command._standby import StandbyWatch
from omnium_db import PoolRoad, create_pool, require_schema
from omnium_grpc import GrpcServer
from omnium_settings import Settings

log = logging.getLogger(__name__)
SERVICE_NAME = command_pb2.DESCRIPTOR.services_by_name["CommandService"].full_name


class CommandApp:
    """Everything one command process holds. `start(port)`, then `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pools: list[asyncpg.Pool] = []
        self.server: GrpcServer | None = None
        self.standby: StandbyWatch | None = None
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, port: int | None = None) -> int:
        settings = self.settings
        people = await create_pool(settings, PoolRoad.PEOPLE, application_name="command")
        self.pools.append(people)
        imports = await create_pool(settings, PoolRoad.IMPORTS, application_name="command")
        self.pools.append(imports)
        reader = await create_pool(settings, PoolRoad.READER, application_name="command", size=4)
        self.pools.append(reader)
        # Migrating is the release's own step (`python -m omnium_db migrate`), never a start-up's.
        await require_schema(reader, "command", settings.database.schema_ahead_allowed)
        road = Road(settings, people, imports)
        if settings.command.database_standby_expected:
            self.standby = StandbyWatch(settings, reader)
            self._tasks.append(asyncio.create_task(self.standby.run(self._stopping)))
        self.server = GrpcServer(settings, name="command")
        # The consoles' calls name their person only through the person's session.
        self.server.use_sessions(CallSessions(reader, settings))
        self.server.add(
            command_pb2_grpc.add_CommandServiceServicer_to_server,
            CommandService(settings, road, reader),
            SERVICE_NAME,
        )
        return await self.server.start(settings.command.port if port is None else port)

    async def stop(self, grace: float | None = None) -> None:
        if self.server is not None:
            await self.server.stop(grace)
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for pool in reversed(self.pools):
            await pool.close()
        self.pools.clear()
