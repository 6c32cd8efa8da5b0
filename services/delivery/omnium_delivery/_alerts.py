"""A client's alerts: one open per client and cause; a new one also goes to the alert webhook."""

from __future__ import annotations

import logging

import asyncpg
import httpx

from omnium_alerts import post_alert
from omnium_delivery._sql import QUERIES
from omnium_delivery._transport import ClientRow
from omnium_settings import Settings

log = logging.getLogger("omnium_delivery._app")


async def client_alert(
    conn: asyncpg.Connection,
    http: httpx.AsyncClient | None,
    settings: Settings,
    client: ClientRow,
    kind: str,
    message: str,
) -> None:
    """One open alert per client and cause; a new one also goes to the alert webhook."""
    alert_id = await conn.fetchval(
        *QUERIES.bind("raise_alert", client_id=client.id, kind=kind, message=message)
    )
    if alert_id is None:
        return
    log.warning("delivery alert %s for %s (%s): %s", alert_id, client.code, kind, message)
    alert = {"alert": alert_id, "client": client.code, "kind": kind, "message": message}
    if await post_alert(http, settings, alert):
        await conn.execute(QUERIES["alert_sent"], alert_id)
