"""The gateway's routes against real PostgreSQL and Redis: bodies, errors, HTTP caching."""

from __future__ import annotations

import asyncpg

from tests.support.games import EVENT, make_games
from tests.support.gateway import running_gateway
from tests.support.servers import Servers


async def test_routes_answer_from_the_database(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=3)
    code = games.unit_codes[games.units[0]]
    await db.execute(
        "INSERT INTO medal_row (event_id, noc, gold, silver, bronze, total, rank) "
        "VALUES ($1, 'JPN', 3, 1, 0, 4, 1), ($1, 'KOR', 1, 2, 2, 5, 2)",
        games.event_id,
    )
    async with running_gateway(database_url, servers.redis_url) as gw:
        events = await gw.get("/v1/events")
        assert events.status_code == 200
        assert events.json()["events"][0]["code"] == EVENT
        unit = await gw.get(f"/v1/events/{EVENT}/units/{code}")
        assert unit.status_code == 200, unit.text
        body = unit.json()
        assert body["code"] == code and body["status"] == "SCHEDULED"
        assert [s["competitor"]["noc"] for s in body["sides"]] == ["KOR", "JPN"]
        assert unit.headers["X-Cache"] == "MISS"
        again = await gw.get(f"/v1/events/{EVENT}/units/{code}")
        assert again.headers["X-Cache"] == "HIT"
        assert again.content == unit.content
        schedule = await gw.get(f"/v1/events/{EVENT}/schedule", params={"date": "2026-09-20"})
        assert schedule.status_code == 200
        assert len(schedule.json()["units"]) == 3
        by_discipline = await gw.get(f"/v1/events/{EVENT}/schedule?discipline=ATH")
        assert by_discipline.json()["units"] == []
        medals = await gw.get(f"/v1/events/{EVENT}/medals?top=1")
        assert medals.json()["rows"] == [
            {"rank": 1, "noc": "JPN", "gold": 3, "silver": 1, "bronze": 0, "total": 4}
        ]
        disciplines = await gw.get(f"/v1/events/{EVENT}/disciplines")
        assert {d["code"]: d["units"] for d in disciplines.json()["disciplines"]} == {
            "ATH": 0,
            "FBL": 3,
        }
