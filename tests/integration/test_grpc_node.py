"""Another team's client: Node's @grpc/grpc-js (from the npm registry, pinned in tests/node),
loading protos/ as they are, calls every method of every service. Each answers with a status
that says what happened (OK, or a refusal in plain words), never UNKNOWN, INTERNAL or
UNIMPLEMENTED, and the reads return what is really there."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from omnium.command.v1 import command_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium.imports.v1 import imports_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_delivery import DeliveryApp
from omnium_scoring import ScoringApp
from tests.support.command import TOKEN, settings_for
from tests.support.imports import MEDALS, SCHEDULE, games_day
from tests.support.scoring import PROVIDERS

NODE = Path(__file__).resolve().parent.parent / "node"
# Answers that mean "we did not handle this": none is allowed.
UNHANDLED = {"UNKNOWN", "INTERNAL", "UNIMPLEMENTED", "UNAVAILABLE", "NO_TARGET"}


def _services() -> dict[str, list[str]]:
    found = {}
    for module in (command_pb2, imports_pb2, scoring_pb2, delivery_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            found[service.full_name] = [m.name for m in service.methods]
    return found


async def test_node_grpc_js_calls_every_method_and_each_answers_plainly(
    database_url: str, tmp_path: Path
) -> None:
    node = shutil.which("node")
    assert node, "node is missing: `make tools` installs nodejs and npm"
    assert (NODE / "node_modules" / "@grpc" / "grpc-js").is_dir(), "run `make tools` (npm ci)"
    async with games_day(database_url) as day:
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        assert ours["status"] == "done", ours["reason"]
        command = f"127.0.0.1:{day.command.port}"
        scoring = ScoringApp(
            settings_for(
                database_url, command_address=command, scoring_providers_dir=str(PROVIDERS)
            )
        )
        delivery = DeliveryApp(settings_for(database_url))
        scoring_port = await scoring.start(0)
        delivery_port = await delivery.start(0)
        try:
            unit = await day.db.fetchval("SELECT id::text FROM unit ORDER BY code LIMIT 1")
            requests: dict[str, Any] = {
                "omnium.command.v1.CommandService/GetTimeline": {
                    "subject": {"kind": "event", "code": "AG2026"},
                    "limit": 5,
                },
                "omnium.imports.v1.ImportsService/ListIntegrations": {},
                "omnium.imports.v1.ImportsService/GetRun": {"run_id": str(ours["id"])},
                "omnium.scoring.v1.ScoringService/GetMatchState": {"unit_id": unit},
                "omnium.scoring.v1.ScoringService/WatchMatch": {"unit_id": unit},
                "omnium.delivery.v1.DeliveryService/ListClients": {},
            }
            job = {
                "targets": {
                    "omnium.command.v1.CommandService": command,
                    "omnium.imports.v1.ImportsService": f"127.0.0.1:{day.imports.grpc_port}",
                    "omnium.scoring.v1.ScoringService": f"127.0.0.1:{scoring_port}",
                    "omnium.delivery.v1.DeliveryService": f"127.0.0.1:{delivery_port}",
                },
                "token": TOKEN,
                "requests": requests,
            }
            process = await asyncio.create_subprocess_exec(
                node,
                str(NODE / "call_every_method.js"),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(json.dumps(job).encode()), 120)
        finally:
            await scoring.stop(grace=1)
            await delivery.stop(grace=1)
    assert process.returncode == 0, err.decode()
    calls = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    by_method = {f"{c['service']}/{c['method']}": c for c in calls}
    expected = {f"{s}/{m}" for s, methods in _services().items() for m in methods}
    assert set(by_method) == expected, sorted(set(by_method) ^ expected)
    unhandled = {
        k: (c["code"], c["details"]) for k, c in by_method.items() if c["code"] in UNHANDLED
    }
    assert unhandled == {}
    for key in requests:
        assert by_method[key]["code"] == "OK", (key, by_method[key])
    timeline = by_method["omnium.command.v1.CommandService/GetTimeline"]["answer"]
    assert timeline["items"] and timeline["items"][0]["code"] == "imports.apply_batch"
    integrations = by_method["omnium.imports.v1.ImportsService/ListIntegrations"]["answer"]
    assert {i["code"] for i in integrations["integrations"]} == {SCHEDULE, MEDALS}
    assert by_method["omnium.scoring.v1.ScoringService/GetMatchState"]["answer"]["unit_id"] == unit
    # Every refusal says what was wrong in words.
    for key, call in by_method.items():
        if call["code"] != "OK":
            assert len(call["details"]) > 15, (key, call)
