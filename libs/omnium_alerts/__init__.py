"""Alerts sent out of omnium: a new alert is POSTed to the on-duty webhook."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import httpx

from omnium_outbound import read_limited, url_host
from omnium_settings import Settings

__all__ = ["post_alert"]

log = logging.getLogger(__name__)


async def post_alert(
    http: httpx.AsyncClient | None, settings: Settings, alert: Mapping[str, object]
) -> bool:
    """POST a new alert to OMNIUM_ALERT_WEBHOOK_URL; True when the receiver took it.

    Nothing to send to (no URL, or no HTTP client) is False; so is a failure, which is logged:
    the alert stays open on the operators' screens either way. `http` should come from
    `omnium_outbound.outbound_client`, so the webhook's address is checked as it is called.
    The URL is a secret (whoever has it can post alerts): logs name its host only."""
    url = settings.server.alert_webhook_url
    if not url or http is None:
        return False
    host = url_host(url)
    try:
        async with http.stream(
            "POST", url, json=alert, timeout=settings.server.alert_webhook_timeout_seconds
        ) as response:
            await read_limited(
                response,
                settings.server.outbound_answer_max_bytes,
                what=f"the alert webhook at {host}",
            )
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        log.warning(
            "alert %s could not be sent to the alert webhook at %s: %s",
            alert.get("alert"),
            host,
            reason,
        )
        return False
    if response.status_code >= 300:
        log.warning(
            "alert %s: the alert webhook at %s answered %s",
            alert.get("alert"),
            host,
            response.status_code,
        )
        return False
    return True
