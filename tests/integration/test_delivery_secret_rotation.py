"""A webhook secret replaced without a failed check: during the overlap every webhook carries a
signature by the new secret and one by the old, and the Standard Webhooks reference library
accepts it with either; after the overlap, only the new one signs."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from omnium.delivery.v1 import delivery_pb2
from omnium_delivery import load_clients
from omnium_delivery._webhook import rotated
from omnium_settings import Settings
from tests.support.delivery import DeliveryClient, running_delivery, settled
from tests.support.games import EVENT, make_games
from tests.support.receiver import Receiver, webhook_receiver
from tests.support.waiting import eventually

OVERLAP = 3600


def whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def hook_client(url: str, secret: str) -> dict[str, object]:
    return {
        "code": "dailyhunt",
        "event": EVENT,
        "transport": "webhook",
        "webhook": {"url": url, "secret": secret},
        "feeds": [{"kind": "medals", "format": "json"}],
    }


def accepts(secret: str, receiver: Receiver) -> bool:
    """Whether the reference library verifies the newest webhook with `secret`."""
    got = receiver.got[-1]
    try:
        Webhook(secret).verify(got.body, got.headers)
    except WebhookVerificationError:
        return False
    return True


async def resend(delivery: DeliveryClient, receiver: Receiver) -> None:
    before = len(receiver.got)
    await delivery.stub.Resend(delivery_pb2.ResendRequest(client_code="dailyhunt"))

    async def arrived() -> bool:
        return len(receiver.got) > before

    await eventually(arrived, what="the webhook sent again")


async def test_a_secret_rotated_by_load_clients_then_the_service_never_fails_a_check(
    db: asyncpg.Connection, database_url: str
) -> None:
    await make_games(db, units=1)
    old, new = whsec(), whsec()
    settings = Settings.from_env(
        {},
        webhook_secret_overlap_seconds=OVERLAP,
        outbound_allowed_networks=("127.0.0.0/8",),
    )
    async with webhook_receiver(old) as receiver:
        await load_clients(db, [hook_client(receiver.url, old)], settings)
        async with running_delivery(database_url) as delivery:
            await eventually(lambda: settled(db, "dailyhunt"), what="the first webhook")
            assert accepts(old, receiver) and not accepts(new, receiver)
            assert len(receiver.got[-1].headers["webhook-signature"].split()) == 1

            # The client's file now says the new secret: both sign until the overlap ends.
            loaded_at = datetime.now(UTC)
            await load_clients(db, [hook_client(receiver.url, new)], settings)
            hook = await db.fetchval("SELECT settings->'webhook' FROM client")
            assert hook["secret"] == new and hook["previous_secret"] == old
            until = datetime.fromisoformat(hook["previous_expires_at"])
            assert loaded_at + timedelta(seconds=OVERLAP - 5) < until
            assert until < loaded_at + timedelta(seconds=OVERLAP + 60)
            await resend(delivery, receiver)
            assert accepts(old, receiver) and accepts(new, receiver)
            assert len(receiver.got[-1].headers["webhook-signature"].split()) == 2
            # The same file loaded again mid-overlap keeps the old secret signing.
            await load_clients(db, [hook_client(receiver.url, new)], settings)
            assert (await db.fetchval("SELECT settings->'webhook' FROM client")) == hook

            # The overlap is over (moved into the past, rather than waited for).
            await db.execute(
                "UPDATE client SET settings = jsonb_set(settings, '{webhook,previous_expires_at}',"
                " to_jsonb($1::text))",
                (datetime.now(UTC) - timedelta(seconds=1)).isoformat(),
            )
            await resend(delivery, receiver)
            assert accepts(new, receiver) and not accepts(old, receiver)

            # The console's way (gRPC): a secret made by omnium, shown once.
            answer = await delivery.stub.RotateWebhookSecret(
                delivery_pb2.RotateWebhookSecretRequest(client_code="dailyhunt")
            )
            made = answer.secret
            assert made.startswith("whsec_") and len(base64.b64decode(made[6:])) == 32
            expires = answer.previous_expires_at.ToDatetime(tzinfo=UTC)
            assert timedelta(seconds=OVERLAP - 60) < expires - datetime.now(UTC)
            await resend(delivery, receiver)
            assert accepts(made, receiver) and accepts(new, receiver)
            assert not accepts(old, receiver)

            with pytest.raises(Exception, match="no webhook client 'nobody'"):
                await delivery.stub.RotateWebhookSecret(
                    delivery_pb2.RotateWebhookSecretRequest(client_code="nobody")
                )


def test_a_previous_secret_never_outlives_its_overlap_nor_comes_from_the_file() -> None:
    now = datetime(2026, 9, 20, 12, 0, tzinfo=UTC)
    first = rotated(None, {"url": "u", "secret": "a", "previous_secret": "forged"}, 60, now)
    assert first == {"url": "u", "secret": "a"}
    second = rotated(first, {"url": "u", "secret": "b"}, 60, now)
    assert second["previous_secret"] == "a"
    assert second["previous_expires_at"] == "2026-09-20T12:01:00+00:00"
    later = now + timedelta(seconds=61)
    assert rotated(second, {"url": "u", "secret": "b"}, 60, later) == {"url": "u", "secret": "b"}
