"""docs/clients/ runs: every curl, Python and Node sample against a running stack (PostgreSQL,
Redis, command, delivery, the gateway with its live routes and API keys, an SFTP server the
media client's files go to), so a sample that no longer works fails here."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import asyncssh
import httpx
import pytest
import redis.asyncio as aioredis

from omnium.command.v1 import command_pb2
from omnium_db import init_connection
from omnium_delivery import load_clients
from omnium_gateway._route_sets import LiveRoutes
from omnium_live import live_hub, stream_key
from tests.conftest import cloned_database
from tests.support.command import CommandClient, running_command
from tests.support.delivery import running_delivery, settled
from tests.support.games import EVENT, make_games
from tests.support.gateway import RunningGateway, gateway_settings, running_gateway
from tests.support.openapi import schema_validator
from tests.support.servers import Servers
from tests.support.sftp import SftpServer, asyncssh_server
from tests.support.sse import reading
from tests.support.waiting import eventually

SAMPLES = Path(__file__).resolve().parents[2] / "docs" / "clients"
KEY = "samples-" + secrets.token_urlsafe(12)
PER_CONNECTION = 3
# How each language runs a sample of a kind; curl has no webhook sample (no verifier library).
RUNNERS = {
    "curl": lambda name: ["bash", str(SAMPLES / "curl" / f"{name}.sh")],
    "python": lambda name: [sys.executable, str(SAMPLES / "python" / f"{name}.py")],
    "js": lambda name: ["node", str(SAMPLES / "js" / f"{name.replace('_', '-')}.mjs")],
}


@dataclass(slots=True)
class Stack:
    gw: RunningGateway
    cmd: CommandClient
    db: asyncpg.Connection
    redis_url: str
    units: list[str]
    sftp: SftpServer


@pytest.fixture(scope="module")
async def stack(
    servers: Servers, template_database: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    options = {"gateway_api_keys": (f"samples:{KEY}",), "gateway_anonymous_reads": False}
    async with cloned_database(servers, template_database, "omnium_samples") as url:
        db = await asyncpg.connect(url)
        await init_connection(db)
        games = await make_games(db, units=3)
        redis = aioredis.from_url(servers.redis_url)
        await redis.delete(stream_key(EVENT))
        await redis.aclose()
        live = LiveRoutes(gateway_settings(url, servers.redis_url, **options))
        try:
            async with (
                running_command(url) as cmd,
                running_delivery(url, servers.redis_url),
                running_gateway(url, servers.redis_url, [live], **options) as gw,
                asyncssh_server(tmp_path_factory.mktemp("sftp"), username="ndtv") as sftp,
            ):
                feeds = [
                    {"kind": "schedule", "format": "json"},
                    {"kind": "medals", "format": "csv"},
                ]
                client = {"code": "ndtv", "event": EVENT, "transport": "sftp", "feeds": feeds}
                await load_clients(db, [{**client, "sftp": sftp.sftp_settings()}])
                await eventually(lambda: settled(db, "ndtv"), what="the SFTP client's files")
                yield Stack(gw, cmd, db, servers.redis_url, games.units, sftp)
        finally:
            await db.close()


async def run(
    argv: list[str], env: dict[str, str], cwd: Path, within: float = 60
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), within)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(
            f"{argv} ran past {within}s:\n{out.decode()}\n{err.decode()}"
        ) from None
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def api_env(stack: Stack, key: str = KEY) -> dict[str, str]:
    return {"OMNIUM_API_URL": stack.gw.url, "OMNIUM_API_KEY": key, "OMNIUM_EVENT": EVENT}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_python_samples_pin_what_the_tests_run() -> None:
    """docs/clients/python/requirements.txt names the versions these tests run them with."""
    for line in (SAMPLES / "python" / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert importlib.metadata.version(name) == version, line
    lock = json.loads((SAMPLES / "js" / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/standardwebhooks"]["version"] == "1.3.0"
    assert lock["packages"]["node_modules/standardwebhooks"]["integrity"].startswith("sha512-")


@pytest.mark.parametrize("language", ["curl", "python", "js"])
async def test_the_schedule_sample_reads_with_a_key_then_gets_304(
    stack: Stack, language: str, tmp_path: Path
) -> None:
    code, out, err = await run(RUNNERS[language]("schedule"), api_env(stack), tmp_path)
    assert code == 0, err
    assert re.search(r"^200: .*ETag \"", out, re.M), out
    assert "304: not modified" in out, out
    # The key is what lets it in: a wrong one fails the sample, with the API's reason.
    code, out, err = await run(RUNNERS[language]("schedule"), api_env(stack, "wrong"), tmp_path)
    assert code != 0
    assert "API key is not known" in out + err


@pytest.mark.parametrize("language", ["curl", "python", "js"])
async def test_the_live_sample_resumes_after_a_disconnect_without_a_loss(
    stack: Stack, language: str, tmp_path: Path
) -> None:
    sample = asyncio.create_task(
        run(
            RUNNERS[language]("live"),
            {**api_env(stack), "OMNIUM_LIVE_EVENTS": str(PER_CONNECTION)},
            tmp_path,
        )
    )
    await reading(live_hub(stack.gw.app), EVENT, listeners=1)
    # Changes keep being saved, also while the sample is away between its two connections.
    n = 0
    while not sample.done():
        n += 1
        answer = await stack.cmd.submit(
            command_id=f"{language}-venue-{n}",
            code="units.set_fields",
            payload={"fields": {"venue": f"Hall {language} {n}"}},
            unit_id=stack.units[n % len(stack.units)],
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
        await asyncio.sleep(0.2)
    code, out, err = await sample
    assert code == 0, f"{out}\n{err}"
    ids = re.findall(r"^event (\S+) unit\.changed$", out, re.M)
    assert len(ids) == 2 * PER_CONNECTION, out
    resumed = re.search(r"^disconnected; resuming after (\S+)$", out, re.M)
    assert resumed is not None and resumed.group(1) == ids[PER_CONNECTION - 1], out
    # Nothing lost, nothing twice: the ids heard are every entry of the stream between the
    # first and the last, though some were saved while the sample was disconnected.
    redis = aioredis.from_url(stack.redis_url, decode_responses=True)
    kept = [entry for entry, _ in await redis.xrange(stream_key(EVENT), ids[0], ids[-1])]
    await redis.aclose()
    assert ids == kept, out


@pytest.mark.parametrize("language", ["python", "js"])
async def test_the_webhook_sample_verifies_with_the_reference_library(
    stack: Stack, language: str, tmp_path: Path
) -> None:
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    port = free_port()
    env = {
        "OMNIUM_WEBHOOK_SECRET": secret,
        "OMNIUM_WEBHOOK_PORT": str(port),
        "OMNIUM_WEBHOOK_MESSAGES": "1",
    }
    receiver = asyncio.create_task(run(RUNNERS[language]("webhook_receiver"), env, tmp_path))
    url = f"http://127.0.0.1:{port}/hooks/{language}"
    async with httpx.AsyncClient(timeout=5) as http:

        async def up() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                # Signed with another secret: the sample must refuse it.
                forged = await http.post(
                    url,
                    content=b'{"type": "feed.updated"}',
                    headers={
                        "webhook-id": "msg_forged",
                        "webhook-timestamp": str(int(time.time())),
                        "webhook-signature": "v1," + base64.b64encode(b"x" * 32).decode(),
                    },
                )
                return forged.status_code == 400
            return False

        await eventually(up, what="the sample receiver to refuse a forged message")
    code = f"hook-{language}"
    hook = {"url": url, "secret": secret}
    await load_clients(
        stack.db,
        [
            {
                "code": code,
                "event": EVENT,
                "transport": "webhook",
                "webhook": hook,
                "feeds": [{"kind": "medals", "format": "json", "top": 3}],
            }
        ],
    )
    status, out, err = await receiver
    assert status == 0, err
    assert "refused" in err
    (line,) = out.strip().splitlines()
    message = json.loads(line)
    assert message["type"] == "feed.updated" and message["data"]["client"] == code
    # What the sample verified is what the OpenAPI document's webhooks section says.
    doc = (await stack.gw.get("/v1/openapi.json")).json()
    body = doc["webhooks"]["feed.updated"]["post"]["requestBody"]["content"]["application/json"]
    errors = list(schema_validator(doc, body["schema"]).iter_errors(message))
    assert not errors, errors[0].message


@pytest.mark.parametrize("language", ["curl", "python"])
async def test_the_sftp_sample_fetches_every_file(
    stack: Stack, language: str, tmp_path: Path
) -> None:
    server = stack.sftp
    env = {
        "OMNIUM_SFTP_HOST": server.host,
        "OMNIUM_SFTP_PORT": str(server.port),
        "OMNIUM_SFTP_USER": server.username,
        "OMNIUM_SFTP_KEY": str(server.client_key),
        "OMNIUM_SFTP_HOST_KEY": server.host_key,
        "OMNIUM_SFTP_DIR": str(tmp_path / "files"),
    }
    code, out, err = await run(RUNNERS[language]("sftp_fetch"), env, tmp_path)
    assert code == 0, f"{out}\n{err}"
    delivered = sorted(p.name for p in server.root.iterdir() if not p.name.startswith("."))
    assert len(delivered) == 2
    fetched = sorted(p.name for p in (tmp_path / "files").iterdir())
    assert fetched == delivered, out
    for name in delivered:
        assert (tmp_path / "files" / name).read_bytes() == (server.root / name).read_bytes()
    # A host that is not the one pinned is refused before anything is read.
    other = {**env, "OMNIUM_SFTP_HOST_KEY": server.host_key.split()[0] + " " + _other_key()}
    shutil.rmtree(tmp_path / "files")
    code, out, err = await run(RUNNERS[language]("sftp_fetch"), other, tmp_path)
    assert code != 0
    assert not any((tmp_path / "files").glob("*"))


def _other_key() -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return key.export_public_key().decode().split()[1]
