"""The imports process: the doorbell, the workers, the timers, and a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg
import httpx
from aiohttp import web

from omnium.command.v1 import command_pb2_grpc
from omnium.imports.v1 import imports_pb2_grpc
from omnium_accounts import CallSessions
from omnium_db import NotifyListener, PoolRoad, create_pool, require_schema
from omnium_grpc import GrpcServer, open_channel
from omnium_imports import _queue
from omnium_imports._doorbell import doorbell_app
from omnium_imports._followups import FollowUps
from omnium_imports._metrics import sample_queue
from omnium_imports._scout import ScoutClient
from omnium_imports._service import SERVICE_NAME as IMPORTS_SERVICE
from omnium_imports._service import ImportsService
from omnium_imports._worker import Worker, run_scheduler
from omnium_imports.run import Pipeline
from omnium_outbound import outbound_client
from omnium_settings import Settings

log = logging.getLogger(__name__)


class ImportsApp:
    """Everything one imports process holds. `start()`, then `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.stopping = asyncio.Event()
        self.workers: list[Worker] = []
        self.followups: FollowUps | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.pool: asyncpg.Pool | None = None
        self.listener: NotifyListener | None = None
        self.runner: web.AppRunner | None = None
        self.scout: ScoutClient | None = None
        self.http: httpx.AsyncClient | None = None
        self.channel = open_channel(settings.command.address, settings)
        self.doorbell_port = 0
        self.grpc: GrpcServer | None = None
        self.grpc_port = 0

    async def start(
        self,
        doorbell_port: int | None = None,
        *,
        workers: int | None = None,
        scheduler: bool = True,
        followups: bool | None = None,
        grpc_port: int | None = None,
    ) -> int:
        """`followups` (the settle window's timer) goes with `scheduler` unless it is given."""
        settings = self.settings
        self.pool = await create_pool(settings, PoolRoad.IMPORTS, application_name="imports")
        await require_schema(self.pool, "imports", settings.database.schema_ahead_allowed)
        self.scout = ScoutClient(settings)
        # The alert webhook: only to an address the operator allows (omnium_outbound).
        self.http = outbound_client(settings)
        pipeline = Pipeline(
            settings,
            self.pool,
            self.scout,
            command_pb2_grpc.CommandServiceStub(self.channel),
            self.http,
            stopping=self.stopping,
        )
        count = settings.imports.workers if workers is None else workers
        self.workers = [Worker(settings, self.pool, pipeline, n) for n in range(count)]
        if self.workers:
            # Back from an outage the workers look at the queue at once: a job queued while
            # the connection was down sent a NOTIFY nobody heard.
            self.listener = NotifyListener(
                settings,
                {_queue.JOB_CHANNEL: self._notified},
                name="imports",
                on_reconnect=self._wake,
            )
            await self.listener.start()
        self.tasks = [asyncio.create_task(w.run(self.stopping)) for w in self.workers]
        self.tasks.append(asyncio.create_task(sample_queue(self.pool, settings, self.stopping)))
        if scheduler:
            self.tasks.append(
                asyncio.create_task(
                    run_scheduler(settings, self.pool, self.stopping, pipeline.alerts)
                )
            )
        if followups is None:
            followups = scheduler
        if followups:
            self.followups = FollowUps(settings, self.pool, self.scout)
            self.tasks.append(asyncio.create_task(self.followups.run(self.stopping)))
        self.grpc = GrpcServer(settings, name="imports")
        # The operators' console acts only through the signed-in person's session.
        self.grpc.use_sessions(CallSessions(self.pool, settings))
        self.grpc.add(
            imports_pb2_grpc.add_ImportsServiceServicer_to_server,
            ImportsService(
                settings, self.pool, pipeline, command_pb2_grpc.CommandServiceStub(self.channel)
            ),
            IMPORTS_SERVICE,
        )
        self.grpc_port = await self.grpc.start(
            settings.imports.port if grpc_port is None else grpc_port
        )
        # aiohttp waits this long for the rings in flight, then as long again for those it had
        # to cancel: both inside OMNIUM_HTTP_GRACE_SECONDS.
        self.runner = web.AppRunner(
            doorbell_app(settings, self.pool, self.stopping),
            access_log=None,
            shutdown_timeout=settings.server.http_grace_seconds / 2,
        )
        await self.runner.setup()
        port = settings.imports.doorbell_port if doorbell_port is None else doorbell_port
        site = web.TCPSite(self.runner, settings.server.bind_host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.doorbell_port = sockets[0].getsockname()[1] if sockets else port
        log.info(
            "imports: doorbell on http://%s:%s, %s workers",
            settings.server.bind_host,
            self.doorbell_port,
            count,
        )
        return self.doorbell_port

    def _notified(self, _payload: str) -> None:
        self._wake()

    def _wake(self) -> None:
        for worker in self.workers:
            worker.wake.set()

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking jobs. A running job goes back to the queue with its run once its batches
        in flight are saved (or cut, after `grace`), so another copy continues it at once; only
        a copy that dies leaves its jobs to their leases. The gRPC calls in flight meanwhile get
        OMNIUM_GRPC_GRACE_SECONDS. The doorbell closes last, its rings in flight given
        OMNIUM_HTTP_GRACE_SECONDS."""
        self.stopping.set()  # from here the doorbell's /readyz answers 503
        # Drained beside the hand-over, not before it: a slow call must not hold a run back.
        drain = asyncio.create_task(self.grpc.stop()) if self.grpc is not None else None
        grace = self.settings.imports.stop_grace_seconds if grace is None else grace
        if self.tasks:
            _, pending = await asyncio.wait(self.tasks, timeout=grace)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if drain is not None:
            await drain
        # Until now the doorbell queued rings as ever (any copy runs them) while saying it was
        # not ready, so a balancer had time to send Scout to another copy, not to a closed port.
        if self.runner is not None:
            await self.runner.cleanup()
        if self.listener is not None:
            await self.listener.close()
        if self.scout is not None:
            await self.scout.close()
        if self.http is not None:
            await self.http.aclose()
        await self.channel.close()
        if self.pool is not None:
            await self.pool.close()
