"""The gateway's routes against real PostgreSQL and Redis: bodies, errors, HTTP caching."""

from __future__ import annotations

from typing import Any

import asyncpg
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from omnium_gateway import Gateway
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


async def test_unknown_things_are_404_and_negative_cached(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    missing_unit = games.unit_codes[games.units[0]][:-1] + "9"
    async with running_gateway(database_url, servers.redis_url) as gw:
        first = await gw.get(f"/v1/events/NOPE26/units/{missing_unit}")
        assert first.status_code == 404
        assert first.json() == {"error": f"There is no unit {missing_unit} in event NOPE26."}
        assert "max-age=45" in first.headers["Cache-Control"]
        second = await gw.get(f"/v1/events/NOPE26/units/{missing_unit}")
        assert second.status_code == 404 and second.headers["X-Cache"] == "HIT"
        for path in (
            "/v1/events/NOPE26/schedule",
            "/v1/events/NOPE26/medals",
            "/v1/events/NOPE26/disciplines",
            f"/v1/events/{EVENT}/schedule?discipline=XYZ",
            f"/v1/events/{EVENT}/units/short",
            "/v1/events/lower case/medals",
            "/v1/nothing/here",
        ):
            answer = await gw.get(path)
            assert answer.status_code == 404, path
            assert answer.headers["Content-Type"].startswith("application/json"), path
            assert answer.json()["error"], path
        reads = gw.gateway.metrics.db_reads()
        await gw.get("/v1/events/NOPE26/medals")
        assert gw.gateway.metrics.db_reads() == reads  # the 404 came from the cache


async def test_bad_parameters_are_400_naming_the_parameter(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    cases = {
        "schedule?date=2026-13-01": "date",
        "schedule?date=yesterday": "date",
        "schedule?date=20260920": "date",
        "schedule?discipline=football": "discipline",
        "schedule?status=PLAYING": "status",
        "schedule?status=RUNNING&status=OFFICIAL": "status",
        "medals?top=0": "top",
        "medals?top=-3": "top",
        "medals?top=1001": "top",
        "medals?top=ten": "top",
        "medals?top=99999999999999999999": "top",
    }
    async with running_gateway(database_url, servers.redis_url) as gw:
        for query, parameter in cases.items():
            answer = await gw.get(f"/v1/events/{EVENT}/{query}")
            assert answer.status_code == 400, query
            assert answer.json()["parameter"] == parameter, query
            assert parameter in answer.json()["error"], query
        posted = await gw.http.post(f"/v1/events/{EVENT}/medals")
        assert posted.status_code == 405 and posted.headers["Allow"] == "GET, HEAD"


async def test_etag_and_304(database_url: str, servers: Servers, db: asyncpg.Connection) -> None:
    await make_games(db, units=2)
    async with running_gateway(database_url, servers.redis_url) as gw:
        first = await gw.get(f"/v1/events/{EVENT}/schedule")
        etag = first.headers["ETag"]
        assert etag.startswith('"') and etag.endswith('"')
        control = first.headers["Cache-Control"]
        assert control.startswith("public, max-age=")
        assert "stale-while-revalidate=30" in control
        same = await gw.get(f"/v1/events/{EVENT}/schedule", headers={"If-None-Match": etag})
        assert same.status_code == 304 and same.content == b""
        assert same.headers["ETag"] == etag and same.headers["X-Cache"] == "HIT"
        listed = await gw.get(
            f"/v1/events/{EVENT}/schedule", headers={"If-None-Match": f'"other", W/{etag}'}
        )
        assert listed.status_code == 304
        other = await gw.get(f"/v1/events/{EVENT}/schedule", headers={"If-None-Match": '"old"'})
        assert other.status_code == 200 and other.content == first.content


async def test_openapi_health_ready_and_metrics(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    # /metrics on the public port only when asked for (the metrics port always has it).
    async with running_gateway(database_url, servers.redis_url, gateway_public_metrics=True) as gw:
        doc = (await gw.get("/v1/openapi.json")).json()
        assert doc["openapi"] == "3.1.0"
        assert "/v1/events/{event}/units/{unit_code}" in doc["paths"]
        assert (await gw.get("/healthz")).json() == {"status": "ok"}
        ready = (await gw.get("/readyz")).json()
        assert ready["ready"] and ready["database"] == "ok" and ready["redis"] == "ok"
        await gw.get("/v1/events")
        answer = await gw.get("/metrics")
        assert answer.headers["content-type"].startswith("text/plain")
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text)
            for s in family.samples
        }
        events = (("code", "200"), ("route", "events"))
        assert samples[("omnium_gateway_requests_total", events)] == 1
        assert samples[("omnium_gateway_db_reads_total", (("ttl_class", "reference"),))] == 1
        assert samples[("omnium_gateway_cache_total", (("result", "MISS"),))] == 1
        assert samples[("omnium_gateway_redis_up", ())] == 1


class EchoRoutes:
    """A route set as live SSE or the scorer console will add one: routes and a document part."""

    def add_routes(self, app: web.Application, gateway: Gateway) -> None:
        async def live(request: web.Request) -> web.StreamResponse:
            refused = await gateway.admit(request)
            if refused is not None:
                return refused
            return web.json_response({"event": request.match_info["event"]})

        app.router.add_get("/v1/events/{event}/live", live)

    def openapi(self) -> dict[str, Any]:
        return {"paths": {"/v1/events/{event}/live": {"get": {"responses": {"200": {}}}}}}


async def test_another_route_set_joins_with_one_line(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    async with running_gateway(database_url, servers.redis_url, route_sets=[EchoRoutes()]) as gw:
        assert (await gw.get(f"/v1/events/{EVENT}/live")).json() == {"event": EVENT}
        doc = (await gw.get("/v1/openapi.json")).json()
        assert "/v1/events/{event}/live" in doc["paths"]
        assert "/v1/events/{event}/medals" in doc["paths"]
