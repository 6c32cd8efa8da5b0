"""Alerts sent out of omnium: a new alert is POSTed to the on-duty webhook."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import httpx

from omnium_settings import Settings

__all__ = ["post_alert"]

log = logging.getLogger(__name__)


async def post_alert(
    http: httpx.AsyncClient | None, settings: Settings, alert: Mapping[str, object]
) -> bool:
    """POST a new alert to OMNIUM_ALERT_WEBHOOK_URL; True when the receiver took it.

    Nothing to send to (no URL, or no HTTP client) is False; so is a failure, which is logged:
    the alert stays open on the operators' screens either way."""
    url = settings.server.alert_webhook_url
    if not url or http is None:
        return False
    try:
        response = await http.post(
            url, json=alert, timeout=settings.server.alert_webhook_timeout_seconds
        )
    except httpx.HTTPError as exc:
        log.warning("alert %s could not be sent to %s: %s", alert.get("alert"), url, exc)
        return False
    if response.status_code >= 300:
        log.warning("alert %s: %s answered %s", alert.get("alert"), url, response.status_code)
        return False
    return True
