"""The server around the road: tokens, health, reflection, limits and a graceful stop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_devstack.stack import dev_process_environ
from omnium_grpc import open_channel
from tests.support.command import CALLERS_ENV, NEXT_TOKEN, command, running_command
from tests.support.games import make_games

OUT = command_pb2
SERVICE = "omnium.command.v1.CommandService"


@pytest.mark.parametrize("token", [None, "not-a-token", ""])
async def test_calls_without_a_good_token_are_refused(
    database_url: str, db: asyncpg.Connection, token: str | None
) -> None:
    games = await make_games(db, units=1)
    async with running_command(database_url) as client:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{client.port}")
        stub = command_pb2_grpc.CommandServiceStub(channel)
        metadata = None if token is None else (("authorization", f"Bearer {token}"),)
        cmd = command("x", "results.set_status", {"status": "RUNNING"}, unit_id=games.units[0])
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Submit(cmd, timeout=10, metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            await stub.GetTimeline(OUT.GetTimelineRequest(), timeout=10, metadata=metadata)
        await channel.close()
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert streamed.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "token" in (caught.value.details() or "")
    assert await db.fetchval("SELECT count(*) FROM command") == 0


async def test_a_callers_second_token_is_accepted_while_it_is_rotated(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    async with running_command(database_url) as client:
        channel = open_channel(f"127.0.0.1:{client.port}", client.settings, token=NEXT_TOKEN)
        stub = command_pb2_grpc.CommandServiceStub(channel)
        answer = await stub.Submit(
            command("x", "results.set_status", {"status": "RUNNING"}, unit_id=games.units[0]),
            timeout=10,
        )
        await channel.close()
    assert answer.outcome == OUT.OUTCOME_ACCEPTED


async def test_health_and_reflection(database_url: str) -> None:
    async with running_command(database_url) as client:
        # Probes ask for health without a token.
        bare = grpc.aio.insecure_channel(f"127.0.0.1:{client.port}")
        health = health_pb2_grpc.HealthStub(bare)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # Reflection, a stream both ways, tells the services only to callers with a token.
        refused = reflection_pb2_grpc.ServerReflectionStub(bare).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in refused:
                pass
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        await bare.close()
        reflection = reflection_pb2_grpc.ServerReflectionStub(client.channel)
        responses = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        names = []
        async for response in responses:
            names = [s.name for s in response.list_services_response.service]
            break
    assert SERVICE in names and "grpc.health.v1.Health" in names


async def test_a_message_over_the_limit_is_refused(database_url: str) -> None:
    async with running_command(database_url, grpc_max_message_bytes=64 * 1024) as client:
        cmd = command(
            "big",
            "units.set_fields",
            {"fields": {"name": "x" * 100_000}},
            unit_id="00000000-0000-0000-0000-000000000000",
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.stub.Submit(cmd, timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_stop_says_not_serving_and_lets_calls_in_flight_finish(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_command(database_url) as client:
        blocker = await asyncpg.connect(database_url)
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", unit)
        call = asyncio.ensure_future(
            client.submit(
                command_id="in-flight",
                code="results.set_status",
                unit_id=unit,
                payload={"status": "RUNNING"},
            )
        )
        await asyncio.sleep(0.3)  # the call is now waiting on the unit's lock
        assert client.app.server is not None
        stopping = asyncio.ensure_future(client.app.server.stop(grace=10))
        await asyncio.sleep(0.2)
        status = await client.app.server.health.Check(
            health_pb2.HealthCheckRequest(service=SERVICE), None
        )
        assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert not stopping.done()
        await tx.rollback()
        await blocker.close()
        answer = await asyncio.wait_for(call, 10)
        await asyncio.wait_for(stopping, 10)
    assert answer.outcome == OUT.OUTCOME_ACCEPTED
    assert await db.fetchval("SELECT status FROM unit") == "RUNNING"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_the_process_stops_cleanly_on_sigterm(database_url: str) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "OMNIUM_DATABASE_URL": database_url,
        "OMNIUM_GRPC_CALLERS": CALLERS_ENV,
        "OMNIUM_COMMAND_PORT": str(port),
        "OMNIUM_GRPC_GRACE_SECONDS": "2",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "omnium_command",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=30, wait_for_ready=True)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await channel.close()
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=15)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.stdout is not None
    output = (await process.stdout.read()).decode()
    assert code == 0, output
    assert "Traceback" not in output


async def test_the_process_explains_a_missing_setting() -> None:
    env = dev_process_environ()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "omnium_command",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 2
    assert b"OMNIUM_DATABASE_URL is not set" in out
