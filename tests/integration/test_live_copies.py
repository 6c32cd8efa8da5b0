"""Live push behind HAProxy in front of two gateway copies (real `python -m omnium_gateway`
processes, HAProxy with the HA profile's configuration): 50 fans read a Games' live stream while
changes are published. One copy stops (SIGTERM: its streams end with a `retry:` hint) or dies
(SIGKILL: its sockets just drop); each fan's client, written as a browser's EventSource is
(after the end or the error, wait the retry and reconnect with Last-Event-ID), lands through
HAProxy on the surviving copy and hears every change exactly once, in order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from dev.copies import haproxy_spec, http_port
from omnium_devstack import port_is_free
from omnium_live import LivePublisher
from omnium_settings import Settings
from tests.support.games import make_event
from tests.support.gateway import GatewayProcess, gateway_process
from tests.support.servers import Servers
from tests.support.waiting import eventually

FANS = 50
# Every fifth fan follows one unit's route: its replay is filtered to that unit as well.
UNIT_FAN_EVERY = 5
UNIT_A = "ATHM100M--------------FNL-000100--"
UNIT_B = "ATHM200M--------------FNL-000100--"
# A keepalive every second keeps HAProxy's 60 s timeouts far away; burst room for every fan's
# first connect and reconnect, and no cap on one client's streams: the fans all connect from
# this machine's one address. Each copy's /metrics is read on its public port.
COPY_SETTINGS = {
    "gateway_workers": "2",
    "gateway_anonymous_reads": "true",
    "gateway_anonymous_burst": "1000",
    "live_heartbeat_seconds": "1",
    "live_max_streams_per_client": "0",
    "gateway_public_metrics": "true",
}
# A change every 30 ms: a fan away for its retry (250 ms at least) misses several, unless its
# Last-Event-ID brings them back.
PUBLISH_EVERY = 0.03


def _ha_settings() -> Settings:
    """Dev-like ports whose HAProxy frontends (port, + 1, + 2) and gateway copies (+ 100,
    + 200) are all free, as the HA profile lays them out."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 30_000)
        wanted = [base, base + 1, base + 2, base + 100, base + 200]
        if all(port_is_free(p) for p in wanted):
            return Settings.from_env(
                {}, gateway_port=base, doorbell_port=base + 1, admin_port=base + 2
            )
    raise AssertionError("no free ports for the copies")


@dataclass(slots=True)
class Copies:
    front: str  # HAProxy
    copies: list[GatewayProcess]


@asynccontextmanager
async def copies_behind_haproxy(
    database_url: str, redis_url: str, data_dir: Path
) -> AsyncIterator[Copies]:
    settings = _ha_settings()
    with contextlib.ExitStack() as stack:
        copies = [
            stack.enter_context(
                gateway_process(
                    database_url,
                    redis_url,
                    gateway_port=str(http_port(settings, "gateway", n)),
                    **COPY_SETTINGS,
                )
            )
            for n in (1, 2)
        ]
        spec = haproxy_spec(settings, data_dir)
        proxy = await asyncio.create_subprocess_exec(
            *spec.program, stdout=asyncio.subprocess.DEVNULL
        )
        try:
            front = f"http://127.0.0.1:{settings.gateway.port}"
            async with aiohttp.ClientSession() as http:

                async def answers() -> bool:
                    with contextlib.suppress(aiohttp.ClientError, OSError):
                        async with http.get(f"{front}/healthz") as response:
                            return response.status == 200
                    return False

                await eventually(answers, within=20, what="HAProxy to answer")
            yield Copies(front, copies)
        finally:
            proxy.terminate()
            await asyncio.wait_for(proxy.wait(), 10)


async def live_listeners(http: aiohttp.ClientSession, copy: GatewayProcess) -> int:
    """The copy's own count of open live streams (its workers summed), read past HAProxy."""
    async with http.get(f"{copy.url}/metrics") as response:
        text = await response.text()
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "omnium_gateway_live_listeners"
    ]
    assert len(found) == 1, text[:200]
    return int(found[0])


@dataclass(slots=True)
class Heard:
    id: str
    kind: str
    n: int | None


@dataclass(slots=True)
class Fan:
    """One browser tab's EventSource: what it heard, and each time it was away."""

    url: str
    # The EventSource's "last event ID string": sent as Last-Event-ID when it reconnects.
    last_id: str = ""
    retry_ms: int = 3000  # until the server says otherwise, as browsers do
    retries: list[int] = field(default_factory=list)  # every `retry:` the server sent
    events: list[Heard] = field(default_factory=list)
    connections: int = 0
    # How each connection ended: "end" (cleanly) or the error's name.
    endings: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    # (when its stream was lost, when it asked again): monotonic seconds.
    away: list[tuple[float, float]] = field(default_factory=list)
    failed: str | None = None

    def numbers(self) -> list[int]:
        return [e.n for e in self.events if e.n is not None]

    async def read(self, content: aiohttp.StreamReader) -> None:
        """The SSE parsing rules: an event is dispatched at its blank line, and only then does
        its `id` become the last event ID; a stream cut mid-event loses that event only."""
        id_buffer = self.last_id
        data: list[str] = []
        kind = ""
        async for raw in content:
            if not raw.endswith(b"\n"):
                return  # the stream ended inside a line: not a line
            line = raw.decode().rstrip("\r\n")
            if not line:
                self.last_id = id_buffer
                if data:
                    body = json.loads("\n".join(data))
                    self.events.append(Heard(id_buffer, kind or "message", body.get("n")))
                data, kind = [], ""
                continue
            if line.startswith(":"):
                if line != ": keepalive":
                    self.comments.append(line)
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id" and "\0" not in value:
                id_buffer = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            elif name == "retry" and value.isdigit():
                self.retry_ms = int(value)
                self.retries.append(self.retry_ms)


async def follow(http: aiohttp.ClientSession, fan: Fan) -> None:
    """The EventSource loop: on the end of the stream or an error, wait the retry and connect
    again with Last-Event-ID. An answer other than a 200 stream fails it for good, as it
    fails an EventSource (which never reconnects after one)."""
    while True:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if fan.last_id:
            headers["Last-Event-ID"] = fan.last_id
        if fan.away:
            lost, _ = fan.away[-1]
            fan.away[-1] = (lost, time.monotonic())
        try:
            async with http.get(fan.url, headers=headers) as response:
                if response.status != 200 or not response.headers.get(
                    "Content-Type", ""
                ).startswith("text/event-stream"):
                    fan.failed = f"{response.status}: {(await response.text())[:200]}"
                    return
                fan.connections += 1
                await fan.read(response.content)
            fan.endings.append("end")
        except (aiohttp.ClientError, OSError) as exc:
            fan.endings.append(type(exc).__name__)
        fan.away.append((time.monotonic(), float("inf")))
        await asyncio.sleep(fan.retry_ms / 1000)


@dataclass(slots=True)
class Published:
    n: int
    id: str
    unit: str
    sent: float  # monotonic, just before its XADD
    saved: float  # monotonic, once Redis answered


async def publish_steadily(
    publisher: LivePublisher, event: str, published: list[Published], stop: asyncio.Event
) -> None:
    """Numbered changes, alternately for unit A and unit B, one or two at a time."""
    while not stop.is_set():
        first = len(published)
        changes = [(n, UNIT_A if n % 2 else UNIT_B) for n in range(first, first + 1 + first % 2)]
        sent = time.monotonic()
        ids = await publisher.publish(
            event, [{"kind": "unit.changed", "unit": unit, "n": n} for n, unit in changes]
        )
        saved = time.monotonic()
        published.extend(
            Published(n, entry_id, unit, sent, saved)
            for (n, unit), entry_id in zip(changes, ids, strict=True)
        )
        await asyncio.sleep(PUBLISH_EVERY)


def _stop_gracefully(copy: GatewayProcess) -> None:
    copy.process.send_signal(signal.SIGTERM)
    assert copy.process.wait(timeout=20) == 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                # pid (comm) state ppid ...: comm may hold spaces, so split after its ")".
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


def _kill_hard(copy: GatewayProcess) -> None:
    """kill -9 of the whole copy: the parent first (it would start its workers again), then
    every worker, so no socket is closed by the gateway's own code."""
    workers = _children(copy.process.pid)
    assert workers, "the copy has no worker processes"
    copy.process.kill()
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    copy.process.wait(timeout=10)


@pytest.mark.parametrize("stop", [_stop_gracefully, _kill_hard], ids=["sigterm", "sigkill"])
async def test_fans_move_to_the_surviving_copy_and_miss_nothing(
    database_url: str, servers: Servers, tmp_path: Path, stop: Callable[[GatewayProcess], None]
) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    await make_event(database_url, event, [UNIT_A])
    redis = aioredis.from_url(servers.redis_url)
    publisher = LivePublisher(redis, max_length=1000)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    published: list[Published] = []
    try:
        async with (
            copies_behind_haproxy(database_url, servers.redis_url, tmp_path) as ha,
            aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http,
        ):
            first, second = ha.copies
            games = f"{ha.front}/v1/events/{event}/live"
            unit = f"{ha.front}/v1/events/{event}/units/{UNIT_A}/live"
            fans = [Fan(unit if i % UNIT_FAN_EVERY == 0 else games) for i in range(FANS)]
            tasks = [asyncio.create_task(follow(http, fan)) for fan in fans]
            try:

                async def all_listening() -> list[int] | None:
                    failed = [f.failed for f in fans if f.failed]
                    assert not failed, failed
                    counts = [await live_listeners(http, c) for c in (first, second)]
                    return counts if sum(counts) == FANS else None

                before = await eventually(all_listening, what="every fan's stream open")
                assert before is not None
                # HAProxy spread the fans over both copies.
                assert all(count > 0 for count in before), before

                # Each stream reads from "now": once every fan has heard a hello, every change
                # published after it reaches every fan.
                async def all_hear_a_hello() -> bool:
                    await publisher.publish(event, [{"kind": "hello", "unit": UNIT_A}])
                    return all(f.events for f in fans)

                await eventually(all_hear_a_hello, what="every fan to hear a hello")

                stop_publishing = asyncio.Event()
                publishing = asyncio.create_task(
                    publish_steadily(publisher, event, published, stop_publishing)
                )
                try:
                    await eventually(lambda: _true(len(published) >= 30), what="changes published")
                    await asyncio.to_thread(stop, first)

                    async def all_on_the_second() -> bool:
                        failed = [f.failed for f in fans if f.failed]
                        assert not failed, failed
                        return await live_listeners(http, second) == FANS

                    await eventually(all_on_the_second, what="every fan on the surviving copy")
                    carried_on_from = len(published)
                    await eventually(
                        lambda: _true(len(published) >= carried_on_from + 30),
                        what="changes published after every fan moved",
                    )
                finally:
                    stop_publishing.set()
                    await publishing

                expected = [p.n for p in published]
                only_a = [p.n for p in published if p.unit == UNIT_A]

                async def all_heard() -> bool:
                    return all(
                        len(f.numbers()) >= len(only_a if f.url == unit else expected) for f in fans
                    )

                # A fan that missed some never hears them all: the checks below say which.
                with contextlib.suppress(AssertionError):
                    await eventually(all_heard, within=10, what="every fan to hear every change")
                await asyncio.sleep(0.5)  # room for a duplicate to show up
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await redis.aclose()

    ids = {p.n: p.id for p in published}
    for i, fan in enumerate(fans):
        assert fan.failed is None, (i, fan.failed)
        wanted = only_a if fan.url == unit else expected
        # Every change, once each, in order, with the id it was saved under; no gap.
        assert fan.numbers() == wanted, (i, fan.endings)
        assert [e.id for e in fan.events if e.n is not None] == [ids[n] for n in wanted]
        assert [e.kind for e in fan.events] == ["hello"] * (len(fan.events) - len(wanted)) + [
            "unit.changed"
        ] * len(wanted), i
        numbers = [tuple(map(int, e.id.split("-"))) for e in fan.events]
        assert numbers == sorted(set(numbers)), i

    # The fans of the stopped copy, and only they, reconnected; each was away while changes
    # were saved, which only its Last-Event-ID could bring back.
    moved = [fan for fan in fans if fan.connections > 1]
    assert len(moved) == before[0], (len(moved), before)
    for fan in moved:
        lost, asked = fan.away[0]
        missed = [p for p in published if lost < p.sent and p.saved < asked]
        if fan.url == unit:
            missed = [p for p in missed if p.unit == UNIT_A]
        assert missed, (fan.away, fan.endings)
        if stop is _stop_gracefully:
            # The stream ended cleanly, with the hint to reconnect soon.
            assert fan.endings[0] == "end", fan.endings
            assert any("stopping" in c for c in fan.comments), fan.comments
            assert fan.retries[0] == 1000 and 250 <= fan.retries[1] <= 1250, fan.retries
            assert asked - lost >= fan.retries[1] / 1000 - 0.01
        else:
            # The sockets just dropped: the stream was cut, never ended; the retry is the one
            # the stream began with.
            assert fan.endings[0] != "end", fan.endings
            assert fan.retries[:2] == [1000, 1000], fan.retries
            assert asked - lost >= 1.0 - 0.01


async def _true(value: bool) -> bool:
    return value
