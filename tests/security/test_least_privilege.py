"""Least privilege for gRPC callers: servers keep only the hashes of callers' tokens, and
production refuses a token written in clear."""

from __future__ import annotations

import gc
import subprocess
import sys

import asyncpg
import grpc
import pytest

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_grpc import Callers, open_channel
from omnium_settings import Settings, deploy_problems
from tests.support.command import TOKEN, running_command

FEED_TOKEN = "feed-token-that-only-the-feed-team-holds"
TIMELINE = command_pb2.GetTimelineRequest(subject=command_pb2.Subject(kind="event", code="AG2026"))


def _hash_token(token: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "omnium_grpc", "hash-token"],
        input=token + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


async def test_a_caller_listed_by_its_token_s_hash_is_let_in_with_the_token(
    database_url: str, db: asyncpg.Connection
) -> None:
    hashed = _hash_token(FEED_TOKEN)
    assert hashed.startswith("sha256=") and FEED_TOKEN not in hashed
    callers = (f"omnium-tests:service:{TOKEN}", f"stats-team:reader:{hashed}")
    async with running_command(database_url, grpc_callers=callers) as client:
        said = {}
        for token in (FEED_TOKEN, hashed, "not-a-token-anyone-holds"):
            channel = open_channel(f"127.0.0.1:{client.port}", client.settings, token=token)
            stub = command_pb2_grpc.CommandServiceStub(channel)
            try:
                await stub.GetTimeline(TIMELINE, timeout=10)
                said[token] = "OK"
            except grpc.aio.AioRpcError as exc:
                said[token] = exc.code().name
            await channel.close()
    # The token opens the door; the hash itself, copied from the settings, does not.
    assert said == {
        FEED_TOKEN: "OK",
        hashed: "UNAUTHENTICATED",
        "not-a-token-anyone-holds": "UNAUTHENTICATED",
    }


def test_hash_token_without_a_token_says_how_to_give_one() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "omnium_grpc", "hash-token"],
        input="",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no token on standard input" in done.stderr


def _reachable(root: object) -> list[object]:
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen[id(item)] = item
        todo.extend(gc.get_referents(item))
    return list(seen.values())


def test_a_server_keeps_no_token_in_clear_even_when_the_settings_give_one() -> None:
    callers = Callers.parse([f"results-feed:provider:{FEED_TOKEN}"])
    held = [
        x
        for x in _reachable(callers)
        if isinstance(x, (str, bytes))
        and (FEED_TOKEN in x if isinstance(x, str) else FEED_TOKEN.encode() in x)
    ]
    assert held == []


def test_a_bad_hash_stops_start_up_in_plain_words() -> None:
    with pytest.raises(Exception) as raised:
        Callers.parse(["stats-team:reader:sha256=abc"])
    assert "is not 64 hex digits after sha256=" in str(raised.value)
    assert "python -m omnium_grpc hash-token" in str(raised.value)


def test_production_refuses_a_token_in_clear_and_takes_its_hash() -> None:
    hashed = _hash_token(FEED_TOKEN)

    def problems(item: str) -> list[str]:
        settings = Settings.from_env(
            {"OMNIUM_ENVIRONMENT": "production", "OMNIUM_GRPC_CALLERS": item}
        )
        return [p for p in deploy_problems(settings) if "OMNIUM_GRPC_CALLERS" in p]

    clear = problems(f"results-feed:provider:{FEED_TOKEN}")
    assert any("gives caller results-feed its token in clear" in p for p in clear), clear
    assert all(FEED_TOKEN not in p for p in clear)
    assert problems(f"results-feed:provider:{hashed}") == []
