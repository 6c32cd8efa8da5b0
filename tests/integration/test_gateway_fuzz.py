"""Schemathesis fuzzes the gateway from its own OpenAPI document, the live routes included: no
5xx, answers match it, and nothing the document allows is refused. Live streams are set to end
after half a second (OMNIUM_LIVE_STREAM_MAX_SECONDS), so each of the fuzzer's requests ends."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from omnium_gateway._openapi import EXAMPLE_UNIT
from omnium_gateway._route_sets import LiveRoutes
from tests.support.games import make_games
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.servers import Servers

# Every operation gets its examples, its coverage cases and 60 fuzzed requests; a live stream's
# lasts up to live_stream_max_seconds. On a busy machine that is more than the default 120 s.
pytestmark = pytest.mark.timeout(300)

CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "positive_data_acceptance",
    )
)


async def test_schema_driven_fuzz_finds_no_server_error(
    database_url: str, servers: Servers, db: asyncpg.Connection, tmp_path: Path
) -> None:
    games = await make_games(db, units=5)
    # The document's example unit exists, so the examples phase reaches real data.
    await db.execute(
        "INSERT INTO unit (event_id, discipline_id, code, name, status) "
        "VALUES ($1, $2, $3, 'Men''s 100m Final', 'RUNNING')",
        games.event_id,
        games.disciplines["ATH"],
        EXAMPLE_UNIT,
    )
    await db.execute(
        "INSERT INTO medal_row (event_id, noc, gold, silver, bronze, total, rank) "
        "SELECT id, 'JPN', 1, 0, 0, 1, 1 FROM event"
    )
    options: dict[str, Any] = {
        "gateway_anonymous_rate_per_second": 1e6,
        "gateway_anonymous_burst": 1_000_000,
        "gateway_other_rate_per_second": 1e6,
        "gateway_other_burst": 1_000_000,
        "live_max_streams_per_client": 0,
        "live_stream_max_seconds": 0.5,
    }
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
    async with running_gateway(database_url, servers.redis_url, [live], **options) as gw:
        document = (await gw.get("/v1/openapi.json")).json()
        assert {"/v1/events/{event}/live", "/v1/events/{event}/units/{unit_code}/live"} <= set(
            document["paths"]
        )
        # The CLI runs beside this event loop, which keeps serving it.
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{gw.url}/v1/openapi.json",
            "--checks",
            CHECKS,
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "60",
            "--workers",
            "1",
            "--seed",
            "20260920",
            "--suppress-health-check",
            "all",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
        )
        output, _ = await process.communicate()
        report = output.decode(errors="replace")
        assert process.returncode == 0, report[-6000:]
        assert (await gw.get("/healthz")).status_code == 200
    assert gw.gateway.metrics.requests("unit", 500) == 0
