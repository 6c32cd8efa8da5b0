"""DeliveryService over gRPC: clients, what each feed last received and when, resend."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import grpc
from grpc import aio

from omnium.delivery.v1 import delivery_pb2, delivery_pb2_grpc
from omnium_delivery._clients import stored_hook
from omnium_delivery._documents import DOCUMENT_TYPES, EXTENSIONS
from omnium_delivery._promise import ClientPromise, read_promise
from omnium_delivery._sql import QUERIES
from omnium_delivery._webhook import new_secret, rotated
from omnium_grpc import timestamp
from omnium_settings import Settings

SERVICE_NAME = delivery_pb2.DESCRIPTOR.services_by_name["DeliveryService"].full_name


def _last_send(row: Mapping[str, Any]) -> delivery_pb2.LastSend:
    send = delivery_pb2.LastSend(
        version=row["a_version"] or 0,
        sha256=row["sha256"] or "",
        bytes=row["bytes"] or 0,
        attempts=row["attempts"] or 0,
        outcome=row["outcome"] or "",
        error=row["error"] or "",
        file_name=row["file_name"] or "",
        resend=bool(row["resend"]),
    )
    if row["saved_at"] is not None:
        send.saved_at.CopyFrom(timestamp(row["saved_at"]))
    if row["delivered_at"] is not None:
        send.delivered_at.CopyFrom(timestamp(row["delivered_at"]))
        if row["saved_at"] is not None:
            send.delay_seconds = (row["delivered_at"] - row["saved_at"]).total_seconds()
    return send


def _file_name(row: Mapping[str, Any]) -> str:
    scope = (row["discipline"] or "GLO").ljust(34, "-")
    parts = [row["event_code"], scope, DOCUMENT_TYPES[row["kind"]]]
    if row["top_n"]:
        parts.append(f"TOP{row['top_n']}")
    return "_".join(parts) + "." + EXTENSIONS[row["format"]]


def _promise(p: ClientPromise | None, settings: Settings) -> delivery_pb2.Promise:
    promise = delivery_pb2.Promise(window_seconds=settings.delivery.promise_window_seconds)
    if p is None:
        promise.share, promise.kept = 1.0, True
        return promise
    share = p.share
    promise.target_seconds = p.target_seconds
    promise.sends = p.sends
    promise.within_target = p.within
    promise.misses = p.misses
    promise.share = 1.0 if share is None else share
    promise.kept = not p.broken(settings.delivery.promise_share)
    promise.p50_seconds = p.p50 or 0.0
    promise.p95_seconds = p.p95 or 0.0
    promise.last_error = p.last_error or ""
    if p.last_delivered_at is not None:
        promise.last_delivered_at.CopyFrom(timestamp(p.last_delivered_at))
    return promise


class DeliveryService(delivery_pb2_grpc.DeliveryServiceServicer):
    def __init__(self, pool: asyncpg.Pool, wake: asyncio.Event, settings: Settings) -> None:
        self.pool = pool
        self.wake = wake
        self.settings = settings

    async def _clients(self, code: str | None) -> list[delivery_pb2.Client]:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(QUERIES["list_clients"], code)
            feeds = await conn.fetch(QUERIES["client_feeds"], [r["id"] for r in rows])
            promises = {p.client_id: p for p in await read_promise(conn, self.settings, code)}
        by_client: dict[str, list[delivery_pb2.Feed]] = {}
        for f in feeds:
            feed = delivery_pb2.Feed(
                id=f["id"],
                kind=f["kind"],
                format=f["format"],
                discipline=f["discipline"] or "",
                top_n=f["top_n"] or 0,
                file_name=_file_name(f),
                version=f["version"],
                owed=f["owed"],
            )
            if f["outcome"] is not None:
                send = _last_send(f)
                send.feed_id = f["id"]
                feed.last_received.CopyFrom(send)
            by_client.setdefault(f["client_id"], []).append(feed)
        out = []
        for r in rows:
            checker = (r["settings"] or {}).get("checker", False)
            out.append(
                delivery_pb2.Client(
                    code=r["code"],
                    name=r["name"],
                    event_code=r["event_code"],
                    transport=r["transport"],
                    enabled=r["enabled"],
                    checker=bool(checker),
                    feeds=by_client.get(r["id"], []),
                    alerts=list(r["alerts"]),
                    promise=_promise(promises.get(r["id"]), self.settings),
                )
            )
        return out

    async def ListClients(
        self, request: delivery_pb2.ListClientsRequest, context: aio.ServicerContext[Any, Any]
    ) -> delivery_pb2.ListClientsResponse:
        return delivery_pb2.ListClientsResponse(clients=await self._clients(None))

    async def GetClient(
        self, request: delivery_pb2.GetClientRequest, context: aio.ServicerContext[Any, Any]
    ) -> delivery_pb2.Client:
        found = await self._clients(request.code)
        if not found:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"there is no client {request.code!r}; ListClients shows every client",
            )
        return found[0]

    async def ListSends(
        self, request: delivery_pb2.ListSendsRequest, context: aio.ServicerContext[Any, Any]
    ) -> delivery_pb2.ListSendsResponse:
        limit = request.limit or 50
        if not 1 <= limit <= 500:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit is 1 to 500")
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                *QUERIES.bind(
                    "list_sends",
                    client_code=request.client_code,
                    feed_id=request.feed_id,
                    at_most=limit,
                )
            )
        sends = []
        for row in rows:
            send = _last_send(row)
            send.feed_id = row["feed_id"]
            send.client_code = row["client_code"]
            sends.append(send)
        return delivery_pb2.ListSendsResponse(sends=sends)

    async def RotateWebhookSecret(
        self,
        request: delivery_pb2.RotateWebhookSecretRequest,
        context: aio.ServicerContext[Any, Any],
    ) -> delivery_pb2.RotateWebhookSecretResponse:
        if not request.client_code:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "say which client: client_code is empty"
            )
        secret, now = new_secret(), datetime.now(UTC)
        overlap = self.settings.delivery.webhook_secret_overlap_seconds
        async with self.pool.acquire() as conn, conn.transaction():
            old = stored_hook(await conn.fetchval(QUERIES["webhook_of"], request.client_code))
            if old is not None:
                hook = rotated(old, {**old, "secret": secret}, overlap, now)
                await conn.execute(QUERIES["set_webhook"], request.client_code, hook)
        if old is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"there is no webhook client {request.client_code!r}; ListClients shows them",
            )
        return delivery_pb2.RotateWebhookSecretResponse(
            secret=secret, previous_expires_at=timestamp(now + timedelta(seconds=overlap))
        )

    async def Resend(
        self, request: delivery_pb2.ResendRequest, context: aio.ServicerContext[Any, Any]
    ) -> delivery_pb2.ResendResponse:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(QUERIES["resend"], request.client_code, request.feed_id)
            if rows:
                await conn.execute(QUERIES["wake_senders"])
        if not rows:
            what = f"feed {request.feed_id} of " if request.feed_id else ""
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"there is no {what}client {request.client_code!r}; ListClients shows them",
            )
        self.wake.set()
        return delivery_pb2.ResendResponse(feeds=len(rows))
