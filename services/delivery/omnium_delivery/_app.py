"""The delivery process: read the outbox, push live, rebuild feeds, send them, record each send."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import asyncpg
import httpx
import redis.asyncio as aioredis

import omnium_db
from omnium.delivery.v1 import delivery_pb2_grpc
from omnium_db import DATABASE_ERRORS, NotifyListener, PoolRoad, create_pool, is_outage
from omnium_delivery import _metrics, _outbox_store, _sending_store
from omnium_delivery._alerts import client_alert
from omnium_delivery._build import FeedRow, build, held_disciplines
from omnium_delivery._clients import load_clients, read_clients_file
from omnium_delivery._documents import Document, off_loop, render
from omnium_delivery._live import LivePush
from omnium_delivery._promise import PromiseWatch
from omnium_delivery._service import SERVICE_NAME, DeliveryService
from omnium_delivery._sftp import SftpTransport
from omnium_delivery._transport import (
    ClientRow,
    ClientSettingsError,
    Outgoing,
    SendResult,
    Sent,
    Transport,
)
from omnium_delivery._webhook import WebhookTransport
from omnium_grpc import GrpcServer
from omnium_outbound import outbound_client
from omnium_settings import Settings
from omnium_telemetry import continued_span

log = logging.getLogger(__name__)
T = TypeVar("T")

OUTBOX_CHANNEL = "omnium_domain_event"
FEED_CHANNEL = "omnium_delivery_feed"
_OUTBOX_BATCH = 500
# Longest a stopping copy spends handing its clients over; past it their leases do.
HAND_OVER_SECONDS = 2.0
_HAND_OVER_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, *DATABASE_ERRORS)


class DeliveryApp:
    """Everything one delivery process holds. `start()`, then `stop()`."""

    def __init__(
        self, settings: Settings, *, on_send: Callable[[Sent], None] | None = None
    ) -> None:
        self.settings = settings
        self.me = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.stopping = asyncio.Event()
        self.outbox_wake = asyncio.Event()
        self.dispatch_wake = asyncio.Event()
        self.pool: asyncpg.Pool | None = None
        self.listener: NotifyListener | None = None
        self.redis: aioredis.Redis | None = None
        self.live: LivePush | None = None
        self.http: httpx.AsyncClient | None = None
        self.grpc: GrpcServer | None = None
        self.grpc_port = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.busy: dict[str, asyncio.Task[None]] = {}
        self.transports: dict[str, tuple[str, Transport]] = {}
        self.on_send = on_send
        # Counted for tests and the benchmark: feeds built (pushes published: `pushes`).
        self.builds = 0
        # True while an outbox pass of this copy holds the cursor.
        self.holds_cursor = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, grpc_port: int | None = None) -> int:
        settings = self.settings
        self.pool = await create_pool(settings, PoolRoad.READER, application_name="delivery")
        await omnium_db.require_schema(
            self.pool, "delivery", settings.database.schema_ahead_allowed
        )
        if settings.delivery.clients_file:
            async with self.pool.acquire() as conn:
                codes = await load_clients(
                    conn, read_clients_file(settings.delivery.clients_file), settings
                )
            log.info("delivery: clients %s loaded from %s", codes, settings.delivery.clients_file)
        if settings.server.redis_url:
            # Bounded waits: a stuck Redis must not hold the outbox cursor (and the feeds).
            self.redis = aioredis.from_url(
                settings.server.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0
            )
            self.live = LivePush(settings, self.redis)
        else:
            log.warning("delivery: OMNIUM_REDIS_URL is not set, so nothing is pushed live")
        # Webhooks and the alert webhook: only to addresses the operator allows (omnium_outbound).
        self.http = outbound_client(settings)
        # Back from an outage, both loops read from their own cursors: the outbox cursor and
        # the feeds marked in the database, so what was saved meanwhile goes out once.
        self.listener = NotifyListener(
            settings,
            {OUTBOX_CHANNEL: self._outbox_notified, FEED_CHANNEL: self._feed_notified},
            name="delivery",
            on_reconnect=self._caught_up,
        )
        await self.listener.start()
        self.tasks = [
            asyncio.create_task(self._outbox_loop()),
            asyncio.create_task(self._dispatch_loop()),
            asyncio.create_task(self._sweep_loop()),
            asyncio.create_task(PromiseWatch(settings, self.pool, self.http).run(self.stopping)),
            asyncio.create_task(self._sample_loop()),
        ]
        if self.live is not None:
            self.tasks.append(asyncio.create_task(self.live.run(self.stopping)))
        self.grpc = GrpcServer(settings, name="delivery")
        self.grpc.add(
            delivery_pb2_grpc.add_DeliveryServiceServicer_to_server,
            DeliveryService(self.pool, self.dispatch_wake, settings),
            SERVICE_NAME,
        )
        self.grpc_port = await self.grpc.start(
            settings.delivery.port if grpc_port is None else grpc_port
        )
        log.info("delivery: gRPC on %s:%s", settings.server.bind_host, self.grpc_port)
        return self.grpc_port

    async def stop(self, grace: float | None = None) -> None:
        """Stop sending. Every client without a send in flight goes to the other copies at
        once; a send in flight gets `grace` (OMNIUM_DELIVERY_STOP_GRACE_SECONDS) to finish and
        be recorded, then its client follows. Cutting it instead would have the other copy send
        that version again, which the client may take twice; only a send still going after the
        grace is cut (its feed stays owed: the same webhook-id, the same SFTP file, again)."""
        self.stopping.set()
        self.outbox_wake.set()
        self.dispatch_wake.set()
        # gRPC calls in flight get OMNIUM_GRPC_GRACE_SECONDS, drained beside the hand-over so
        # that the clients go to the other copies at once.
        drain = asyncio.create_task(self.grpc.stop()) if self.grpc is not None else None
        cursor_held = self.holds_cursor
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        workers = list(self.busy.values())
        await self._hand_over(cursor_held=cursor_held, sending=list(self.busy))
        if workers:
            await self._let_sends_finish(workers, grace)
        if drain is not None:
            await drain
        await self._close_connections()

    async def _let_sends_finish(
        self, workers: list[asyncio.Task[None]], grace: float | None
    ) -> None:
        """Each worker ends after its send in flight, freeing its client and waking the other
        copies itself; one still sending after the grace is cut and its client handed over."""
        grace = self.settings.delivery.stop_grace_seconds if grace is None else grace
        _, cut = await asyncio.wait(workers, timeout=grace)
        for task in cut:
            task.cancel()
        for task in cut:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if cut:
            await self._hand_over(cursor_held=False, sending=[])

    async def _close_connections(self) -> None:
        for _, transport in self.transports.values():
            with contextlib.suppress(Exception):
                await transport.close()
        if self.listener is not None:
            await self.listener.close()
        if self.http is not None:
            await self.http.aclose()
        if self.live is not None:
            self.live.forget()
        if self.redis is not None:
            await self.redis.aclose()
        if self.pool is not None:
            await self.pool.close()

    async def _hand_over(self, *, cursor_held: bool, sending: list[str]) -> None:
        """Free every client this copy still holds but those it is `sending` to (one claimed as
        the stop came never ran its own release) and wake the other copies; the outbox cursor
        was freed with its pass's transaction, and its readers are woken if that pass was cut.
        Failing this, the leases still hand the clients over when they run out."""
        if self.pool is None:
            return
        try:
            async with asyncio.timeout(HAND_OVER_SECONDS), self.pool.acquire() as conn:
                released = await _sending_store.release_clients(conn, copy=self.me, sending=sending)
                await _sending_store.wake_senders(conn)
                if cursor_held:
                    await _outbox_store.wake_readers(conn)
        except _HAND_OVER_ERRORS as exc:
            log.warning("delivery: clients not handed over (%s); their leases will free them", exc)
            return
        if released:
            log.info("delivery: %d clients handed over to the other copies", released)

    @property
    def pushes(self) -> int:
        """Changes Redis took for live push."""
        return 0 if self.live is None else self.live.published

    def _outbox_notified(self, _payload: str) -> None:
        self.outbox_wake.set()

    def _feed_notified(self, _payload: str) -> None:
        self.dispatch_wake.set()

    def _caught_up(self) -> None:
        self.outbox_wake.set()
        self.dispatch_wake.set()

    # -- the outbox -----------------------------------------------------------------------

    async def _outbox_loop(self) -> None:
        while not self.stopping.is_set():
            self.outbox_wake.clear()
            try:
                read = await self.outbox_pass()
            except DATABASE_ERRORS as exc:
                log.warning("delivery: reading the outbox failed (%s); trying again", exc)
                read = 0
                await asyncio.sleep(1)
            if read:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.outbox_wake.wait(), self.settings.delivery.poll_seconds)

    async def outbox_pass(self) -> int:
        """Read what was saved since the last pass: push it live, mark the feeds it touches.
        Only one copy reads at a time (the cursor is claimed with SKIP LOCKED)."""
        try:
            return await self._outbox_pass()
        finally:
            self.holds_cursor = False

    async def _outbox_pass(self) -> int:
        assert self.pool is not None
        settings = self.settings
        async with self.pool.acquire() as conn, conn.transaction():
            cursor = await _outbox_store.claim_cursor(conn)
            if cursor is None:
                return 0
            self.holds_cursor = True
            rows = await _outbox_store.read_outbox(
                conn,
                after_id=cursor["last_id"],
                recent_ids=cursor["recent_ids"],
                lag_seconds=settings.delivery.outbox_lag_seconds,
                batch_size=_OUTBOX_BATCH,
                held_disciplines=[d.upper() for d in settings.delivery.checker_disciplines],
            )
            if not rows:
                return 0
            ids = [r["id"] for r in rows]
            marked = await _outbox_store.mark_feeds(
                conn,
                ids,
                debounce_seconds=settings.delivery.feed_debounce_seconds,
                live_debounce_seconds=settings.delivery.live_debounce_seconds,
            )
            await _outbox_store.move_cursor(
                conn,
                last_id=max(ids),
                recent_ids=[*cursor["recent_ids"], *ids],
                lag_seconds=settings.delivery.outbox_lag_seconds,
            )
            if marked:
                await _sending_store.wake_senders(conn)
        if self.live is not None:
            # Queued once the cursor moved, never sent here: a Redis that is down must not
            # hold up the feeds.
            self.live.add(rows)
        if marked:
            self.dispatch_wake.set()
        return len(rows)

    async def _sweep_loop(self) -> None:
        trimmed_at: float | None = None
        every = self.settings.delivery.feed_rebuild_seconds
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), every)
            if self.stopping.is_set():
                return
            try:
                await self.sweep()
                if trimmed_at is None or time.monotonic() - trimmed_at > 3600:
                    trimmed_at = time.monotonic()
                    await self.trim_log()
            except DATABASE_ERRORS as exc:
                log.warning("delivery: the sweep failed (%s)", exc)

    async def sweep(self) -> int:
        """Check every feed against its data again: a safety net for anything the outbox pass
        could not see (a commit later than the lag window, a copy that died mid-pass). Feeds
        whose bytes did not change are not sent."""
        assert self.pool is not None
        async with self.pool.acquire() as conn:
            marked = await _outbox_store.sweep(conn)
            if marked:
                await _sending_store.wake_senders(conn)
        self.dispatch_wake.set()
        return len(marked)

    async def trim_log(self) -> int:
        """Forget sends older than OMNIUM_DELIVERY_LOG_DAYS, but never a feed's newest: it is
        what "last received" says. Returns how many were forgotten."""
        assert self.pool is not None
        async with self.pool.acquire() as conn:
            gone = await _sending_store.trim_attempts(conn, self.settings.delivery.log_days)
        if gone:
            log.info(
                "delivery: %s sends older than %s days forgotten",
                gone,
                self.settings.delivery.log_days,
            )
        return gone

    async def _sample_loop(self) -> None:
        """The gauges /metrics shows that take a query, read every metrics_sample_seconds."""
        assert self.pool is not None
        sample_seconds = self.settings.telemetry.metrics_sample_seconds
        while not self.stopping.is_set():
            try:
                async with self.pool.acquire() as conn:
                    row = await _outbox_store.outbox_lag(conn)
                _metrics.OUTBOX_LAG.set(row["lag"])
                _metrics.FEEDS_OWED.set(row["owed"])
            except DATABASE_ERRORS as exc:
                log.debug("delivery: the outbox lag could not be read (%s)", exc)
            _metrics.LIVE_PUBLISHED.set(self.pushes)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), sample_seconds)

    # -- sending --------------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        settings = self.settings
        while not self.stopping.is_set():
            self.dispatch_wake.clear()
            delay = settings.delivery.poll_seconds
            try:
                delay = await self._dispatch()
            except DATABASE_ERRORS as exc:
                log.warning("delivery: claiming clients failed (%s); trying again", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.dispatch_wake.wait(), max(delay, 0.005))

    async def _dispatch(self) -> float:
        """Claim clients with feeds due and start a worker for each; the seconds until the
        next feed falls due."""
        assert self.pool is not None
        settings = self.settings
        async with self.pool.acquire() as conn:
            free = settings.delivery.clients_at_once - len(self.busy)
            if free > 0:
                claimed = await _sending_store.claim_clients(
                    conn,
                    copy=self.me,
                    lease_seconds=settings.delivery.lease_seconds,
                    busy_client_ids=list(self.busy),
                    at_most=free,
                )
                for client in claimed:
                    task = asyncio.create_task(self._work(client))
                    self.busy[client.id] = task
                    task.add_done_callback(functools.partial(self._done, client.id))
            delay = await _sending_store.next_due(
                conn, copy=self.me, busy_client_ids=list(self.busy)
            )
        if delay is None:
            return settings.delivery.poll_seconds
        return min(float(delay), settings.delivery.poll_seconds)

    def _done(self, client_id: str, _task: asyncio.Task[None]) -> None:
        self.busy.pop(client_id, None)
        self.dispatch_wake.set()

    async def _transport(self, client: ClientRow) -> Transport:
        key = json.dumps(client.settings, sort_keys=True) + client.transport
        held = self.transports.get(client.id)
        if held is not None and held[0] == key:
            return held[1]
        if held is not None:
            # The client's settings changed: its old connection goes.
            await held[1].close()
        transport: Transport
        if client.transport == "sftp":
            transport = SftpTransport(self.settings, client.code, client.settings)
        else:
            transport = WebhookTransport(self.settings, self.http, client.code, client.settings)
        self.transports[client.id] = (key, transport)
        return transport

    async def _work(self, client: ClientRow) -> None:
        """Send a client's due feeds, one at a time over its one connection, until none is due
        or it cannot be reached (then its feeds wait `delivery_retry_seconds`)."""
        assert self.pool is not None
        renew = asyncio.create_task(self._renew(client))
        try:
            try:
                transport = await self._transport(client)
            except ClientSettingsError as exc:
                await self._unreachable(client, "send_failed", str(exc))
                return
            while not self.stopping.is_set():
                async with self.pool.acquire() as conn:
                    feeds = await _sending_store.due_feeds(conn, client.id)
                if not feeds:
                    return
                for feed in feeds:
                    if self.stopping.is_set():
                        return  # the send in flight is done; another copy sends the rest
                    if not await self._deliver(client, transport, feed):
                        async with self.pool.acquire() as conn:
                            await _sending_store.postpone_client(
                                conn,
                                client_id=client.id,
                                retry_seconds=self.settings.delivery.retry_seconds,
                            )
                        return
        except Exception as exc:
            if not is_outage(exc):
                log.exception("delivery: working client %s failed", client.code)
            else:
                # The feed is still owed (its send is recorded only with the database back):
                # the next claim sends it again.
                log.warning("delivery: client %s waits for the database (%r)", client.code, exc)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            with contextlib.suppress(Exception):
                async with self.pool.acquire() as conn:
                    await _sending_store.release_client(conn, client_id=client.id, copy=self.me)
                    if self.stopping.is_set():
                        # The other copies take the client now, not at their next poll.
                        await _sending_store.wake_senders(conn)

    async def _renew(self, client: ClientRow) -> None:
        assert self.pool is not None
        every = self.settings.delivery.lease_seconds / 3
        while True:
            await asyncio.sleep(every)
            try:
                async with self.pool.acquire() as conn:
                    await _sending_store.renew_client(
                        conn,
                        client_id=client.id,
                        copy=self.me,
                        lease_seconds=self.settings.delivery.lease_seconds,
                    )
            except Exception as exc:
                # A renew lost to an outage must not end the renewing: the next one holds the
                # lease again (and the work's own end would re-raise this, skipping the release).
                if not is_outage(exc):
                    raise
                log.warning("delivery: could not renew client %s (%r)", client.code, exc)

    async def _deliver(self, client: ClientRow, transport: Transport, feed: FeedRow) -> bool:
        assert self.pool is not None
        settings = self.settings
        window = feed.debounce(settings.delivery)
        async with self.pool.acquire() as conn:
            document = await build(
                conn,
                event_id=client.event_id,
                event_code=client.event_code,
                feed=feed,
                held=held_disciplines(client.settings, settings.delivery),
            )
            self.builds += 1
            if document is None:  # a held medal table: the client keeps the version it has
                await _sending_store.hold_feed(conn, feed, window_seconds=window)
                log.info("delivery: %s's medal table waits for a medal's approval", client.code)
                return True
            content_sha = await off_loop(document, document.content_sha, feed.format)
            if content_sha == feed.delivered_content_sha and not feed.force:
                await _sending_store.keep_unchanged(conn, feed, window_seconds=window)
                return True
            new = content_sha != feed.content_sha or feed.version == 0
            version = feed.version + 1 if new else feed.version
            newest = await _sending_store.new_version(
                conn, feed, version=version, content_sha=content_sha, is_new=new
            )
        saved_at = newest["saved_at"]
        # The send continues the trace of the newest change it carries (its outbox row's).
        with continued_span(
            "delivery.send",
            [newest["trace_context"]],
            attributes={
                "omnium.client": client.code,
                "omnium.transport": client.transport,
                "omnium.feed.kind": feed.kind,
                "omnium.feed.version": version,
            },
        ) as span:
            sent = await self._send(
                client, transport, feed, document, version, content_sha, saved_at
            )
            span.set_attribute("omnium.send.outcome", sent[0].outcome)
        result, item = sent
        if self.on_send is not None:
            self.on_send(Sent(client, item, result))
        return result.outcome == "delivered"

    async def _send(
        self,
        client: ClientRow,
        transport: Transport,
        feed: FeedRow,
        document: Document,
        version: int,
        content_sha: str,
        saved_at: datetime | None,
    ) -> tuple[SendResult, Outgoing]:
        """Render, send and record one version of a feed."""
        assert self.pool is not None
        settings = self.settings
        window = feed.debounce(settings.delivery)
        body = await off_loop(document, render, document, feed.format, version, datetime.now(UTC))
        item = Outgoing(
            client_code=client.code,
            feed_id=feed.id,
            kind=feed.kind,
            format=feed.format,
            file_name=document.file_name(feed.format),
            version=version,
            body=body,
            sha256=hashlib.sha256(body).hexdigest(),
            resend=feed.force,
        )
        result = await transport.send(item)
        async with self.pool.acquire() as conn:
            await _sending_store.record_send(
                conn,
                feed,
                item,
                result,
                client_id=client.id,
                content_sha=content_sha,
                saved_at=saved_at,
                retry_seconds=settings.delivery.retry_seconds,
                window_seconds=window,
            )
            if result.outcome != "delivered" and result.alert:
                await client_alert(
                    conn, self.http, self.settings, client, result.alert, result.error or ""
                )
        _metrics.record_send(client.transport, client.code, result, saved_at, resend=feed.force)
        return result, item

    async def _unreachable(self, client: ClientRow, kind: str, message: str) -> None:
        assert self.pool is not None
        async with self.pool.acquire() as conn:
            await _sending_store.postpone_client(
                conn, client_id=client.id, retry_seconds=self.settings.delivery.retry_seconds
            )
            await client_alert(conn, self.http, self.settings, client, kind, message)
