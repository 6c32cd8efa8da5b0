"""TLS between services: with a CA bundle set, every channel a service opens uses TLS, and with
client auth every server takes only callers whose certificate the CA signed. A scorer's tap
goes gateway -> scoring -> command, and a Scout run imports -> command, all over mutual TLS."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnium_grpc import open_channel
from omnium_settings import Settings, SettingsError
from tests.support.games import make_games
from tests.support.imports import games_day
from tests.support.scoring import running_console
from tests.support.tls import make_tls


async def _health(channel: grpc.aio.Channel) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(), timeout=5
    )
    return int(reply.status)


async def test_a_scorer_tap_crosses_gateway_scoring_and_command_over_mutual_tls(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    tls = make_tls(tmp_path / "tls")
    stranger = make_tls(tmp_path / "stranger", name="somebody else's CA")
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(database_url, **tls.settings()) as site:
        await site.accounts.create("mina", "Mina Park", "scorer", "a long password")
        await site.assign("mina", games.units)
        async with httpx.AsyncClient(base_url=site.url) as http:
            signed = await http.post(
                "/score/api/sign-in", json={"login": "mina", "password": "a long password"}
            )
            tapped = await http.post(
                f"/score/api/matches/{unit}/actions",
                json={"client_id": "t:1", "kind": "start_period"},
                headers={"X-CSRF-Token": signed.json()["csrf"]},
            )
        assert tapped.json()["outcome"] == "saved", tapped.text
        command = f"127.0.0.1:{site.scoring.command.port}"
        settings = site.scoring.settings
        # Our own channel, with the deployment's settings: TLS, our certificate.
        async with open_channel(command, settings) as ours:
            assert await _health(ours) == health_pb2.HealthCheckResponse.SERVING
        refused: dict[str, grpc.aio.AioRpcError] = {}
        callers = {
            "plain": grpc.aio.insecure_channel(command),
            "no certificate": grpc.aio.secure_channel(
                command, grpc.ssl_channel_credentials(tls.ca.read_bytes())
            ),
            "another CA's certificate": grpc.aio.secure_channel(
                command,
                grpc.ssl_channel_credentials(
                    tls.ca.read_bytes(), stranger.key.read_bytes(), stranger.cert.read_bytes()
                ),
            ),
        }
        for name, channel in callers.items():
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _health(channel)
            refused[name] = caught.value
            await channel.close()
        # A channel that trusts another CA does not take our server's certificate.
        untrusting = Settings.from_env(
            {},
            database_url=database_url,
            grpc_tls_ca_file=str(stranger.ca),
            grpc_tls_cert_file=str(stranger.cert),
            grpc_tls_key_file=str(stranger.key),
            grpc_tls_client_auth=True,
        )
        async with open_channel(command, untrusting) as doubting:
            with pytest.raises(grpc.aio.AioRpcError) as mistrusted:
                await _health(doubting)
    assert all(e.code() == grpc.StatusCode.UNAVAILABLE for e in refused.values()), refused
    assert mistrusted.value.code() == grpc.StatusCode.UNAVAILABLE
    saved = await db.fetchval("SELECT count(*) FROM match_action WHERE unit_id = $1", unit)
    assert saved == 1


async def test_a_scout_run_goes_imports_to_command_over_mutual_tls(
    database_url: str, tmp_path: Path
) -> None:
    tls = make_tls(tmp_path / "tls").settings()
    async with games_day(database_url, command_settings=tls, import_overrides=tls) as day:
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        row = await day.wait_for_run(run.id)
        units = await day.db.fetchval("SELECT count(*) FROM unit")
    assert row["status"] == "done", row["reason"]
    assert units > 100


def test_client_auth_without_a_ca_bundle_is_refused_with_what_to_set(tmp_path: Path) -> None:
    tls = make_tls(tmp_path)
    with pytest.raises(SettingsError, match="OMNIUM_GRPC_TLS_CA_FILE"):
        Settings.from_env(
            {},
            grpc_tls_cert_file=str(tls.cert),
            grpc_tls_key_file=str(tls.key),
            grpc_tls_client_auth=True,
        )
