"""Every service serves Prometheus text on a /metrics port of its own: each one, started as its
own process (`python -m omnium_<service>`), parses with prometheus_client's own parser, and its
counters move when it does work."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.delivery.v1 import delivery_pb2, delivery_pb2_grpc
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_delivery import load_clients
from omnium_devstack.stack import dev_process_environ
from omnium_grpc import open_channel
from tests.support.command import CALLERS_ENV, TOKEN, command, settings_for
from tests.support.delivery import first_send
from tests.support.games import EVENT, make_games
from tests.support.monitoring import metric_names
from tests.support.receiver import webhook_receiver
from tests.support.servers import Servers
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

SERVICES = ("command", "scoring", "imports", "delivery", "admin", "gateway")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Scrape:
    """One /metrics answer, parsed by prometheus_client's parser."""

    def __init__(self, text: str) -> None:
        self.samples: list[Sample] = [
            s for family in text_string_to_metric_families(text) for s in family.samples
        ]
        self.names = {s.name for s in self.samples}

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels` (0 with none)."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )


async def scrape(port: int) -> Scrape:
    async with httpx.AsyncClient(timeout=5) as http:
        answer = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return Scrape(answer.text)


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


@asynccontextmanager
async def _process(
    name: str, env: dict[str, str], ports: list[int], logs: Path
) -> AsyncIterator[None]:
    log = (logs / f"{name}.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", f"omnium_{name}", env=env, stdout=log, stderr=log
    )
    try:
        for port in ports:

            async def up(port: int = port) -> bool:
                if proc.returncode is not None:
                    text = (logs / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise AssertionError(f"{name} exited ({proc.returncode}):\n{text}")
                return await _listening(port)

            await eventually(up, within=60, every=0.1, what=f"{name} on port {port}")
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def test_every_service_serves_metrics_that_move_with_work(
    db: asyncpg.Connection, database_url: str, servers: Servers, tmp_path: Path
) -> None:
    games = await make_games(db, units=1)
    port = {f"{s}": _free_port() for s in SERVICES}
    port["doorbell"] = _free_port()
    metrics = {s: _free_port() for s in SERVICES}
    base = dev_process_environ()
    base.update(
        OMNIUM_DATABASE_URL=database_url,
        OMNIUM_REDIS_URL=servers.redis_url,
        OMNIUM_GRPC_CALLERS=CALLERS_ENV,
        OMNIUM_GRPC_TOKEN=TOKEN,
        # What the manifests set: JSON lines; and the access log, switched on here.
        OMNIUM_LOG_LEVEL="INFO",
        OMNIUM_LOG_FORMAT="json",
        OMNIUM_HTTP_ACCESS_LOG="true",
        # The standby watch runs (as in HA), so its gauge is served (0 here: no standby).
        OMNIUM_DATABASE_STANDBY_EXPECTED="true",
        OMNIUM_METRICS_SAMPLE_SECONDS="0.2",
        OMNIUM_FEED_DEBOUNCE_SECONDS="0.05",
        OMNIUM_GATEWAY_WORKERS="2",
        OMNIUM_GATEWAY_REDIS_PREFIX=f"test-metrics-{os.getpid()}:",
        OMNIUM_COMMAND_ADDRESS=f"127.0.0.1:{port['command']}",
        OMNIUM_IMPORTS_ADDRESS=f"127.0.0.1:{port['imports']}",
        OMNIUM_SCORING_ADDRESS=f"127.0.0.1:{port['scoring']}",
        OMNIUM_DELIVERY_ADDRESS=f"127.0.0.1:{port['delivery']}",
        OMNIUM_DOORBELL_PORT=str(port["doorbell"]),
        **{f"OMNIUM_{s.upper()}_PORT": str(port[s]) for s in SERVICES},
        **{f"OMNIUM_{s.upper()}_METRICS_PORT": str(metrics[s]) for s in SERVICES},
    )
    settings = settings_for(database_url)
    async with webhook_receiver() as receiver, AsyncExitStack() as stack:
        await load_clients(
            db,
            [
                {
                    "code": "dailyhunt",
                    "event": EVENT,
                    "transport": "webhook",
                    "webhook": {"url": receiver.url, "secret": receiver.secret},
                    "feeds": [{"kind": "results", "format": "json"}],
                }
            ],
        )
        listens = {
            "imports": [port["imports"], port["doorbell"]],
            "gateway": [port["gateway"]],
        }
        for name in SERVICES:
            await stack.enter_async_context(
                _process(name, base, [*listens.get(name, [port[name]]), metrics[name]], tmp_path)
            )
        await first_send(db, "dailyhunt", within=60)
        before = {s: await scrape(metrics[s]) for s in SERVICES}
        # Every process shows its database pools.
        for name in SERVICES:
            family = (
                "omnium_gateway_db_pool_in_use" if name == "gateway" else "omnium_db_pool_in_use"
            )
            assert family in before[name].names, name

        # The work: a change through command, which delivery sends to a webhook; a match read
        # from scoring; a doorbell and a list from imports; a page of the console; two public
        # reads from the gateway (one from the database, one from the cache).
        channels = {
            s: open_channel(f"127.0.0.1:{port[s]}", settings)
            for s in ("command", "scoring", "imports", "delivery")
        }
        for channel in channels.values():
            stack.push_async_callback(channel.close)
        answer = await command_pb2_grpc.CommandServiceStub(channels["command"]).Submit(
            command(
                "metrics-1",
                "results.set_sides",
                {"sides": [{"order": 1, "score": "3"}, {"order": 2, "score": "1"}]},
                unit_id=games.units[0],
            ),
            timeout=10,
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
        await scoring_pb2_grpc.ScoringServiceStub(channels["scoring"]).ListMatches(
            scoring_pb2.ListMatchesRequest(), timeout=10
        )
        await imports_pb2_grpc.ImportsServiceStub(channels["imports"]).ListIntegrations(
            imports_pb2.ListIntegrationsRequest(), timeout=10
        )
        delivery = delivery_pb2_grpc.DeliveryServiceStub(channels["delivery"])
        async with httpx.AsyncClient(timeout=10) as http:
            rung = await http.post(
                f"http://127.0.0.1:{port['doorbell']}/doorbell/nobody", content=b"{}"
            )
            assert rung.status_code in (401, 404)
            page = await http.get(f"http://127.0.0.1:{port['admin']}/sign-in")
            assert page.status_code == 200
            for _ in range(2):
                read = await http.get(f"http://127.0.0.1:{port['gateway']}/v1/events")
                assert read.status_code == 200

        async def delivered() -> bool:
            s = await scrape(metrics["delivery"])
            return s.value(
                "omnium_delivery_delay_seconds_count", transport="webhook", client="dailyhunt"
            ) > before["delivery"].value(
                "omnium_delivery_delay_seconds_count", transport="webhook", client="dailyhunt"
            )

        await eventually(delivered, within=60, every=0.1, what="the change delivered and measured")

        async def both_reads() -> bool:
            # A worker hands its request counts over within a second (FLUSH_SECONDS).
            s = await scrape(metrics["gateway"])
            events = {"route": "events", "code": "200"}
            was = before["gateway"].value("omnium_gateway_requests_total", **events)
            return s.value("omnium_gateway_requests_total", **events) - was >= 2

        await eventually(both_reads, within=10, every=0.1, what="the gateway's two reads counted")
        await delivery.ListClients(delivery_pb2.ListClientsRequest(), timeout=10)
        after = {s: await scrape(metrics[s]) for s in SERVICES}
        # Not on the public port: the internet may not read them (OMNIUM_GATEWAY_PUBLIC_METRICS).
        async with httpx.AsyncClient(timeout=5) as http:
            public = await http.get(f"http://127.0.0.1:{port['gateway']}/metrics")

    def moved(process: str, name: str, **labels: str) -> float:
        return after[process].value(name, **labels) - before[process].value(name, **labels)

    handled = "omnium_grpc_server_handled_total"
    assert moved("command", handled, grpc_method="Submit", grpc_code="OK") == 1
    assert moved("command", "omnium_grpc_server_handling_seconds_count", grpc_method="Submit") == 1
    assert moved("scoring", handled, grpc_method="ListMatches", grpc_code="OK") == 1
    assert moved("imports", handled, grpc_method="ListIntegrations", grpc_code="OK") == 1
    assert moved("delivery", handled, grpc_method="ListClients", grpc_code="OK") == 1
    assert moved("delivery", "omnium_delivery_sends_total", client="dailyhunt") >= 1
    assert "omnium_delivery_outbox_lag_seconds" in after["delivery"].names
    assert "omnium_delivery_within_target_ratio" in after["delivery"].names
    assert "omnium_imports_queue_jobs" in after["imports"].names
    assert "omnium_imports_queue_oldest_seconds" in after["imports"].names
    doorbell = {"service": "imports", "route": "/doorbell/{integration_code}"}
    assert moved("imports", "omnium_http_requests_total", **doorbell) == 1
    assert moved("admin", "omnium_http_requests_total", service="admin", route="/sign-in") == 1
    # The gateway: both reads summed over its workers, one from the database, one cached.
    events = {"route": "events", "code": "200"}
    assert moved("gateway", "omnium_gateway_requests_total", **events) == 2
    assert moved("gateway", "omnium_gateway_request_duration_seconds_count", route="events") == 2
    assert moved("gateway", "omnium_gateway_cache_total", result="MISS") >= 1
    assert moved("gateway", "omnium_gateway_db_reads_total") >= 1
    assert "omnium_gateway_live_listeners" in after["gateway"].names
    assert "omnium_gateway_redis_up" in after["gateway"].names
    assert public.status_code == 404 and "OMNIUM_GATEWAY_METRICS_PORT" in public.text

    # Every metric the alert rules and the dashboard read is served by this stack.
    served = set().union(*(scraped.names for scraped in after.values()))
    assert sorted(metric_names() - served) == []
    assert after["command"].value("omnium_db_sync_standbys") == 0

    # Each process logged JSON lines only, and the two HTTP servers an access line a request.
    logged = {s: _json_lines(tmp_path / f"{s}.log") for s in SERVICES}
    for name, lines in logged.items():
        assert lines and all(line["service"] == name for line in lines), name
    assert _access(logged["admin"], "/sign-in") == [200]
    assert _access(logged["gateway"], "/v1/events") == [200, 200]


def _json_lines(path: Path) -> list[dict[str, object]]:
    # stdout and stderr share the file: the gateway's one plain stdout line (its port, read by
    # the dev stack) is not a log line.
    lines = [
        line
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("gateway listening on http://")
    ]
    parsed = [json.loads(line) for line in lines]
    assert all(isinstance(p, dict) and p.get("level") for p in parsed), path
    return parsed


def _access(lines: list[dict[str, object]], path: str) -> list[object]:
    return [
        line["status"]
        for line in lines
        if line["logger"] == "omnium.access" and line.get("path") == path
    ]
