"""Webhooks: a JSON body signed as Standard Webhooks say, retried with growing waits."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from omnium_delivery._transport import ClientSettingsError, Outgoing, SendResult, backoff
from omnium_outbound import AnswerTooLarge, OutboundRefused, read_limited, redacted
from omnium_settings import Settings

log = logging.getLogger(__name__)


def secret_key(secret: str) -> bytes:
    """A `whsec_<base64>` secret is its decoded bytes (Standard Webhooks); any other, its text."""
    if secret.startswith("whsec_"):
        return base64.b64decode(secret.removeprefix("whsec_"))
    return secret.encode()


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: HMAC-SHA256 over "id.timestamp.body", base64."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def new_secret() -> str:
    """A fresh signing secret: 32 random bytes as `whsec_<base64>`."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def rotated(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], overlap_seconds: int, now: datetime
) -> dict[str, Any]:
    """Webhook settings `new`, with the secret they replace kept as the previous one for
    `overlap_seconds` (or the previous one already kept, while it lasts)."""
    hook = {k: v for k, v in new.items() if k not in ("previous_secret", "previous_expires_at")}
    if not old or not old.get("secret"):
        return hook
    if old["secret"] != hook.get("secret"):
        hook["previous_secret"] = old["secret"]
        hook["previous_expires_at"] = (now + timedelta(seconds=overlap_seconds)).isoformat()
        return hook
    until = _until(old)
    if old.get("previous_secret") and until is not None and now < until:
        hook["previous_secret"] = old["previous_secret"]
        hook["previous_expires_at"] = old["previous_expires_at"]
    return hook


def _until(hook: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(hook["previous_expires_at"]))
    except (KeyError, ValueError):
        return None


def envelope(item: Outgoing, now: datetime) -> bytes:
    document: object = item.body.decode()
    if item.format == "json":
        document = json.loads(item.body)
    return json.dumps(
        {
            "type": "feed.updated",
            "timestamp": now.isoformat(),
            "data": {
                "client": item.client_code,
                "feed": item.feed_id,
                "kind": item.kind,
                "format": item.format,
                "file_name": item.file_name,
                "version": item.version,
                "sha256": item.sha256,
                "document": document,
            },
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


class WebhookTransport:
    def __init__(
        self,
        settings: Settings,
        http: httpx.AsyncClient | None,
        client_code: str,
        config: Mapping[str, object],
    ) -> None:
        self.settings = settings
        self.http = http
        self.client_code = client_code
        hook = config.get("webhook")
        if not isinstance(hook, Mapping) or not hook.get("url") or not hook.get("secret"):
            raise ClientSettingsError(
                f"client {client_code}: a webhook client needs 'webhook': {{'url': ..., "
                "'secret': 'whsec_...'}}"
            )
        self.url = str(hook["url"])
        # What logs and the send log show: a query may hold the receiver's token.
        self.shown_url = redacted(self.url)
        try:
            self.key = secret_key(str(hook["secret"]))
            previous = hook.get("previous_secret")
            self.previous = secret_key(str(previous)) if previous else None
        except ValueError:
            raise ClientSettingsError(
                f"client {client_code}: webhook.secret starts with whsec_ but the rest is not "
                "base64"
            ) from None
        self.previous_until = _until(hook) if self.previous is not None else None

    def keys(self, now: datetime) -> list[bytes]:
        """The secrets that sign a webhook sent at `now`: the previous one too while it lasts."""
        if self.previous is not None and self.previous_until and now < self.previous_until:
            return [self.key, self.previous]
        return [self.key]

    async def send(self, item: Outgoing) -> SendResult:
        assert self.http is not None, "a webhook transport that sends needs an HTTP client"
        body = envelope(item, datetime.now(UTC))
        # The same id on every try, so the receiver can drop a repeat; a resend is a new message.
        message_id = f"msg_{item.client_code}_{item.feed_id}_v{item.version}_{item.sha256[:12]}"
        if item.resend:
            message_id += "_" + uuid.uuid4().hex[:8]
        tries = max(1, self.settings.delivery.webhook_tries)
        error = ""
        for attempt in range(1, tries + 1):
            stamp = int(time.time())
            headers = {
                "content-type": "application/json",
                "webhook-id": message_id,
                "webhook-timestamp": str(stamp),
                "webhook-signature": " ".join(
                    sign(key, message_id, stamp, body) for key in self.keys(datetime.now(UTC))
                ),
            }
            try:
                async with self.http.stream(
                    "POST",
                    self.url,
                    content=body,
                    headers=headers,
                    timeout=self.settings.delivery.webhook_timeout_seconds,
                ) as response:
                    # Read (to a limit) so the connection can be used again.
                    await read_limited(
                        response,
                        self.settings.server.outbound_answer_max_bytes,
                        what=self.shown_url,
                    )
                if 200 <= response.status_code < 300:
                    return SendResult("delivered", attempt, None, datetime.now(UTC))
                error = f"{self.shown_url} answered {response.status_code}"
                if response.status_code not in (408, 409, 425, 429) and response.status_code < 500:
                    # The receiver refuses this message itself: trying again would not help.
                    return SendResult("refused", attempt, error, alert="send_failed")
            except (OutboundRefused, AnswerTooLarge) as exc:
                # Trying again would be refused again, or read as much again.
                error = f"{self.shown_url}: {exc}"
                log.warning("webhook %s: %s", self.client_code, error)
                return SendResult("refused", attempt, error, alert="send_failed")
            except httpx.TimeoutException:
                limit = self.settings.delivery.webhook_timeout_seconds
                error = f"{self.shown_url} did not answer within {limit}s"
            except httpx.HTTPError as exc:
                error = f"{self.shown_url} could not be reached: {str(exc) or type(exc).__name__}"
            log.warning("webhook %s: try %s of %s: %s", self.client_code, attempt, tries, error)
            if attempt < tries:
                await asyncio.sleep(
                    backoff(self.settings.delivery.webhook_retry_base_seconds, attempt)
                )
        return SendResult("failed", tries, error, alert="send_failed")

    async def close(self) -> None:
        return None
