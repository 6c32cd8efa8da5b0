"""What the delivery process shows on /metrics: sends, save-to-delivered delay, outbox lag,
and each client's share within target."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import Counter, Gauge, Histogram

from omnium_delivery._transport import SendResult

SENDS = Counter(
    "omnium_delivery_sends",
    "Feeds sent, by transport, client and outcome (delivered, failed, refused).",
    ["transport", "client", "outcome"],
)
# Around the promise: push within 2 s, files within 10 s.
DELAY = Histogram(
    "omnium_delivery_delay_seconds",
    "Seconds from the save of the newest change a send carried to its delivery, by transport "
    "and client (resends left out).",
    ["transport", "client"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 60.0, 300.0),
)
OUTBOX_LAG = Gauge(
    "omnium_delivery_outbox_lag_seconds",
    "Age of the oldest saved change delivery has not read from the outbox, or, if older, of "
    "the change an owed feed waits to send; 0 when nothing waits.",
)
FEEDS_OWED = Gauge("omnium_delivery_feeds_owed", "Client feeds with newer data than they hold.")
LIVE_PUBLISHED = Gauge(
    "omnium_delivery_live_published",
    "Changes this process handed to Redis for live push since it started.",
)
WITHIN_TARGET = Gauge(
    "omnium_delivery_within_target_ratio",
    "Share of a client's changes delivered within its target over the promise window "
    "(1 when it had no sends).",
    ["transport", "client"],
)
WINDOW_SENDS = Gauge(
    "omnium_delivery_window_sends",
    "Sends of a client over the promise window (resends left out).",
    ["transport", "client"],
)
PROMISE_BROKEN = Gauge(
    "omnium_delivery_promise_broken",
    "1 while a client is under the promise (OMNIUM_DELIVERY_PROMISE_SHARE within target).",
    ["transport", "client"],
)


def record_send(
    transport: str, client: str, result: SendResult, saved_at: datetime | None, *, resend: bool
) -> None:
    """A send by its outcome, and a first delivery's delay from the save (not a resend's)."""
    SENDS.labels(transport, client, result.outcome).inc()
    if (
        result.outcome == "delivered"
        and not resend
        and saved_at is not None
        and result.delivered_at is not None
    ):
        DELAY.labels(transport, client).observe((result.delivered_at - saved_at).total_seconds())
