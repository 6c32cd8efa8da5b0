"""Changes saved while wrk reads: the public API benchmark's writer and its freshness check.

A gateway that is fast only while nothing changes proves little: on a Games day scores are saved
while fans read most, and each save must reach the caches (the outbox relay's invalidation)
however busy the gateway is. The writer sends score changes to live units through the real
command service at a steady rate while a wrk run lasts; afterwards every changed unit must show
its last score, through the gateway and through Varnish, within a few seconds: well inside the
time their caches would keep the old answer, so only the relay's invalidation can show it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench._common import BenchError, free_port, service_env
from bench.scoring import process
from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_grpc import actor_message, command_message, open_channel
from omnium_settings import Settings

TOKEN = "bench-api-writer"


@dataclass
class Writer:
    """Score changes to `units` (id -> code), `rate` a second, while `writing()` lasts."""

    stub: command_pb2_grpc.CommandServiceStub
    units: dict[str, str]
    rate: float
    latest: dict[str, str] = field(default_factory=dict)  # unit code -> last score saved
    sent: int = 0
    refused: list[str] = field(default_factory=list)
    _scores: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    async def _one(self, unit_id: str, n: int) -> None:
        score = str(next(self._scores))
        command = command_message(
            f"bench-api-{time.time_ns()}-{n}",
            "results.set_sides",
            {"sides": [{"order": 1, "score": score}]},
            actor_message("scorer", "bench scorer", screen="bench"),
            unit_id=unit_id,
        )
        answer = await self.stub.Submit(command, timeout=10)
        self.sent += 1
        if answer.outcome == command_pb2.OUTCOME_ACCEPTED:
            self.latest[self.units[unit_id]] = score
        else:
            self.refused.append(f"{answer.outcome}: {answer.reason}")

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Changes go out at the rate asked (one unit after another) until the block ends."""
        ids = list(self.units)
        began = time.monotonic()

        async def loop() -> None:
            pending: set[asyncio.Task[None]] = set()
            try:
                for n in itertools.count():
                    await asyncio.sleep(max(0.0, began + n / self.rate - time.monotonic()))
                    task = asyncio.create_task(self._one(ids[n % len(ids)], n))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
            finally:
                # The changes already sent are answered before their scores are checked.
                await asyncio.gather(*pending, return_exceptions=True)

        task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def command_service(database_url: str, redis_url: str, tmp: Path) -> AsyncIterator[str]:
    """The real command service; yields its address."""
    port = free_port()
    env = service_env({"OMNIUM_COMMAND_PORT": port}, database_url, redis_url, TOKEN)
    async with process("command", ["-m", "omnium_command"], env, port, tmp):
        yield f"127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def writer(address: str, units: dict[str, str], rate: float) -> AsyncIterator[Writer]:
    channel = open_channel(address, Settings.from_env({}, grpc_token=TOKEN))
    try:
        yield Writer(command_pb2_grpc.CommandServiceStub(channel), units, rate)
    finally:
        await channel.close()


async def stale_units(
    urls: Sequence[str], latest: dict[str, str], event: str, key: str, within: float
) -> list[str]:
    """The changed units some URL still shows an older score for, `within` seconds on."""
    deadline = time.monotonic() + within
    waiting = {(url, code) for url in urls for code in latest}
    async with httpx.AsyncClient(timeout=5, headers={"X-API-Key": key}) as http:
        while waiting:
            for url, code in sorted(waiting):
                answer = await http.get(f"{url}/v1/events/{event}/units/{code}")
                if answer.status_code == 200:
                    shown = answer.json()["sides"][0]["score"]
                    if shown == latest[code]:
                        waiting.discard((url, code))
            if not waiting or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    return sorted(f"{code} at {url}" for url, code in waiting)


def relay_figures(metrics_text: str) -> tuple[float, float, float]:
    """From the gateway's /metrics: the relay's stops, the batches it published, and the upper
    bound of the lag bucket of its slowest batch (seconds)."""
    stops = 0.0
    buckets: list[tuple[float, float]] = []
    for line in metrics_text.splitlines():
        if line.startswith("omnium_gateway_relay_stops_total "):
            stops = float(line.split()[1])
        elif line.startswith("omnium_gateway_relay_lag_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(bound), float(line.split()[1])))
    if not buckets:
        raise BenchError("the gateway's /metrics has no omnium_gateway_relay_lag_seconds")
    total = max(count for _, count in buckets)
    worst = min(bound for bound, count in buckets if count >= total) if total else float("nan")
    return stops, total, worst
