"""The HA profile's copies: HAProxy (Debian's, real) in front of two copies of each HTTP service.

Each copy here is a small aiohttp server that answers the ready check its service answers and
names itself; HAProxy runs with the configuration the dev stack writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from aiohttp import web

from dev.copies import _HTTP, addresses, haproxy_spec, http_port, two_copies
from dev.games_day import services
from omnium_devstack import port_is_free
from omnium_settings import Settings
from tests.support.waiting import eventually


def _settings() -> Settings:
    """Dev-like ports: three in a row whose copies' (+ 100, + 200) are free as well."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 30_000)
        wanted = [base + n + step for n in range(3) for step in (0, 100, 200)]
        if all(port_is_free(p) for p in wanted):
            return Settings.from_env(
                {}, gateway_port=base, doorbell_port=base + 1, admin_port=base + 2
            )
    raise AssertionError("no free ports for the copies")


@asynccontextmanager
async def _copy(
    name: str, port: int, check: str, *, dies_on_post: bool = False
) -> AsyncIterator[web.AppRunner]:
    async def answer(request: web.Request) -> web.Response:
        if request.method == "POST" and dies_on_post:
            # As a copy killed with the request in flight: the connection ends, no answer.
            assert request.transport is not None
            request.transport.abort()
        return web.json_response({"copy": name, "body": (await request.text())})

    app = web.Application()
    app.router.add_get(check, answer)
    app.router.add_get("/who", answer)
    app.router.add_post("/who", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield runner
    finally:
        with contextlib.suppress(RuntimeError):  # the test may have stopped it already
            await runner.cleanup()


async def _until(check: Callable[[], Awaitable[bool]], within: float = 20) -> None:
    await eventually(
        check,
        within=within,
        every=0.2,
        ignoring=(httpx.HTTPError,),
        what="HAProxy to send requests to both copies",
    )


async def test_haproxy_spreads_over_both_copies_and_skips_one_that_stops(tmp_path: Path) -> None:
    settings = _settings()
    spec = haproxy_spec(settings, tmp_path)
    for service, (_, check) in _HTTP.items():
        front = f"http://127.0.0.1:{settings.value(_HTTP[service][0].lower())}"
        async with (
            _copy(f"{service}-1", http_port(settings, service, 1), check) as first,
            _copy(f"{service}-2", http_port(settings, service, 2), check),
        ):
            proc = await asyncio.create_subprocess_exec(
                *spec.program, stdout=asyncio.subprocess.DEVNULL
            )
            try:
                async with httpx.AsyncClient(base_url=front, timeout=5) as http:

                    async def both_up() -> bool:
                        seen = Counter([(await http.get("/who")).json()["copy"] for _ in range(8)])
                        return len(seen) == 2

                    await _until(both_up)
                    await first.cleanup()
                    # Straight away, before the checks mark it down: a refused connection is
                    # sent to the other copy (option redispatch), never answered 503.
                    answers = [await http.get("/who") for _ in range(20)]
                    assert [a.status_code for a in answers] == [200] * 20
                    assert {a.json()["copy"] for a in answers} == {f"{service}-2"}
            finally:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 10)


async def test_a_copy_that_dies_mid_request_is_retried_on_the_other(tmp_path: Path) -> None:
    """The scorers' syncs are POSTs that are safe to send twice (client ids): a gateway copy
    killed with one in flight costs the scorer nothing."""
    settings = _settings()
    spec = haproxy_spec(settings, tmp_path)
    check = _HTTP["gateway"][1]
    async with (
        _copy("gateway-1", http_port(settings, "gateway", 1), check, dies_on_post=True),
        _copy("gateway-2", http_port(settings, "gateway", 2), check),
    ):
        proc = await asyncio.create_subprocess_exec(
            *spec.program, stdout=asyncio.subprocess.DEVNULL
        )
        try:
            front = f"http://127.0.0.1:{settings.gateway.port}"
            async with httpx.AsyncClient(base_url=front, timeout=5) as http:

                async def both_up() -> bool:
                    seen = {(await http.get("/who")).json()["copy"] for _ in range(8)}
                    return len(seen) == 2

                await _until(both_up)
                answers = [await http.post("/who", content=f"tap {n}") for n in range(10)]
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)
    assert [a.status_code for a in answers] == [200] * 10
    assert [a.json() for a in answers] == [
        {"copy": "gateway-2", "body": f"tap {n}"} for n in range(10)
    ]


def test_every_service_runs_twice_and_callers_are_given_both(tmp_path: Path) -> None:
    settings = Settings.from_env({})
    specs = two_copies(services(settings, tmp_path / "scout-secret"), settings, tmp_path)
    names = Counter(s.name.rsplit("-", 1)[0] for s in specs)
    for service in ("command", "scoring", "imports", "delivery", "gateway", "admin"):
        assert names[service] == 2, names
    ports = [url for s in specs for _, url in s.listens]
    assert len(ports) == len(set(ports)), "two listeners on one port"
    given = addresses(settings)
    assert given["OMNIUM_COMMAND_ADDRESS"] == "127.0.0.1:50051,127.0.0.1:50151"
    assert given["OMNIUM_SCORING_ADDRESS"] == "127.0.0.1:50052,127.0.0.1:50152"
