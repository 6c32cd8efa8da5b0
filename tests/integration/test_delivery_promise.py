"""The delivery promise: a client made slow (a webhook that answers after 3 s) falls
under 95 % within target, which raises an alert to the on-duty webhook; once it answers quickly
again and the slow sends leave the window, the alert is cleared."""

from __future__ import annotations

import functools
import socket
from typing import Any

import asyncpg
import httpx
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from omnium.command.v1 import command_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium_delivery import load_clients
from omnium_metrics import serve_metrics
from tests.support.command import running_command
from tests.support.delivery import first_send, running_delivery, sends
from tests.support.games import EVENT, make_games
from tests.support.receiver import Receiver, webhook_receiver
from tests.support.waiting import eventually

# Small, so the test runs in seconds: the promise's own numbers, on a short window.
WINDOW = 6.0
SLOW = 3.0


def _results_hook(url: str, secret: str) -> dict[str, Any]:
    return {
        "code": "dailyhunt",
        "name": "DailyHunt",
        "event": EVENT,
        "transport": "webhook",
        "webhook": {"url": url, "secret": secret},
        "feeds": [{"kind": "results", "format": "json"}],
    }


async def _score(cmd: Any, unit_id: str, n: int) -> None:
    answer = await cmd.submit(
        command_id=f"promise-{n}",
        code="results.set_sides",
        payload={"sides": [{"order": 1, "score": str(n)}, {"order": 2, "score": "0"}]},
        unit_id=unit_id,
    )
    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason


def _promise_alerts(on_duty: Receiver) -> list[dict[str, Any]]:
    return [g.json for g in on_duty.got if g.json.get("kind") == "promise"]


async def _open_alert(db: asyncpg.Connection) -> str | None:
    message: str | None = await db.fetchval(
        "SELECT message FROM delivery_alert WHERE kind = 'promise' AND status = 'open'"
    )
    return message


def _scraped(port: int, name: str, **labels: str) -> float | None:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


async def test_a_slow_client_raises_the_promise_alert_and_it_clears_when_it_recovers(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit_id = games.units[0]
    delays_before = (
        REGISTRY.get_sample_value(
            "omnium_delivery_delay_seconds_count", {"transport": "webhook", "client": "dailyhunt"}
        )
        or 0.0
    )
    metrics = serve_metrics("test", "127.0.0.1", _free_port())
    assert metrics is not None
    async with webhook_receiver() as on_duty, webhook_receiver() as client:
        await load_clients(db, [_results_hook(client.url, client.secret)])
        async with (
            running_command(database_url) as cmd,
            running_delivery(
                database_url,
                alert_webhook_url=on_duty.url,
                push_target_seconds=2.0,
                delivery_promise_window_seconds=WINDOW,
                delivery_promise_check_seconds=0.2,
                feed_debounce_seconds=0.05,
                webhook_timeout_seconds=10.0,
            ) as delivery,
        ):
            await first_send(db, "dailyhunt")
            # Slow: the change reaches the client 3 s after the save, over its 2 s target.
            client.delay = SLOW
            await _score(cmd, unit_id, 1)
            await eventually(lambda: _open_alert(db), within=30, what="the promise alert")
            raised = await eventually(
                lambda: _async(_promise_alerts(on_duty)), within=10, what="the alert sent"
            )
            assert raised[0]["client"] == "dailyhunt" and not raised[0].get("cleared")
            assert "within 2.0 s" in raised[0]["message"] and "95%" in raised[0]["message"]
            slow = [s for s in await sends(db, "dailyhunt") if s["saved_at"] is not None]
            assert slow and all(
                (s["delivered_at"] - s["saved_at"]).total_seconds() >= SLOW for s in slow
            )
            shown = (
                await delivery.stub.GetClient(delivery_pb2.GetClientRequest(code="dailyhunt"))
            ).promise
            assert not shown.kept and shown.misses >= 1 and shown.p95_seconds >= SLOW
            assert (
                _scraped(
                    metrics.port,
                    "omnium_delivery_within_target_ratio",
                    transport="webhook",
                    client="dailyhunt",
                )
                == 0.0
            )

            # Recovered: quick again. A change whose send is within target, and the slow ones
            # leave the window: the alert clears (a new change each time one went out slowly).
            client.delay = 0.0
            n = 2
            while True:
                count = len(await sends(db, "dailyhunt"))
                await _score(cmd, unit_id, n)
                newest = (await eventually(functools.partial(_sent_after, db, count), within=30))[
                    -1
                ]
                if (newest["delivered_at"] - newest["saved_at"]).total_seconds() <= 2.0:
                    break
                n += 1
                assert n < 10, "no send reached the client within 2 s"
            cleared = await eventually(
                lambda: _async([a for a in _promise_alerts(on_duty) if a.get("cleared")]),
                within=WINDOW + 20,
                what="the alert cleared",
            )
            assert cleared[0]["client"] == "dailyhunt" and "holds" in cleared[0]["message"]
            assert await _open_alert(db) is None
            shown = (
                await delivery.stub.GetClient(delivery_pb2.GetClientRequest(code="dailyhunt"))
            ).promise
            assert shown.kept and shown.misses == 0
            assert (
                _scraped(
                    metrics.port,
                    "omnium_delivery_within_target_ratio",
                    transport="webhook",
                    client="dailyhunt",
                )
                == 1.0
            )
    metrics.close()
    # One raise and one clear, each sent once.
    assert [bool(a.get("cleared")) for a in _promise_alerts(on_duty)] == [False, True]
    delays_after = REGISTRY.get_sample_value(
        "omnium_delivery_delay_seconds_count", {"transport": "webhook", "client": "dailyhunt"}
    )
    assert delays_after is not None and delays_after >= delays_before + 2


async def _sent_after(db: asyncpg.Connection, count: int) -> list[asyncpg.Record]:
    """The client's sends, once there are more than `count`."""
    rows = await sends(db, "dailyhunt")
    return rows if len(rows) > count else []


async def _async(value: Any) -> Any:
    return value


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
