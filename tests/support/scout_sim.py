"""The Scout simulator in tests: running it over HTTP, making runs and reading them whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from omnium_scout_sim import Games, ScoutSimulator

# The seed every simulator of these tests draws its Games from.
SEED = 7


@asynccontextmanager
async def running(sim: ScoutSimulator) -> AsyncIterator[httpx.AsyncClient]:
    await sim.start()
    try:
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=10) as client:
            yield client
    finally:
        await sim.stop()


async def new_run(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await http.post("/control/runs", json=body)
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()["run"]
    return run


async def read_all(http: httpx.AsyncClient, run_id: str, page: int = 500) -> list[list[Any]]:
    """Every page of a run, read as omnium reads it: until a short page."""
    pages: list[list[Any]] = []
    offset = 0
    while True:
        response = await http.get(
            f"/v1/runs/{run_id}/items", params={"offset": offset, "limit": page}
        )
        assert response.status_code == 200, response.text
        items = response.json()["items"]
        pages.append(items)
        if len(items) < page:
            return pages
        offset += len(items)


def finals(games: Games, discipline: str) -> list[str]:
    return [
        u.external_id
        for u in games.units.values()
        if u.discipline == discipline and u.medals != "none"
    ]
