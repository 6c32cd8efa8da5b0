"""Provider feeds: raw messages kept as received, turned into the same actions a scorer sends."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from aiohttp import web

from omnium.scoring.v1 import scoring_pb2
from omnium_scoring import ProviderFileError, load_provider_file
from tests.support.games import make_games
from tests.support.scoring import PROVIDERS, assign, running_scoring

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "odf_play_by_play.xml"


def message(unit_code: str, text: str | None = None) -> bytes:
    return (text or SAMPLE.read_text()).replace("{unit_code}", unit_code).encode()


async def push(scoring: Any, body: bytes, key: str = "test-odf-key") -> scoring_pb2.ProviderAnswer:
    answer: scoring_pb2.ProviderAnswer = await scoring.stub.ReceiveProviderMessage(
        scoring_pb2.ProviderMessage(
            provider="odf-fbl", api_key=key, content_type="application/xml", body=body
        ),
        timeout=30,
    )
    return answer


async def test_a_provider_message_gives_the_state_a_scorer_gives(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=2)
    fed, scored = games.units
    await assign(db, [scored])  # the scorer's match; the provider's needs none
    async with running_scoring(database_url) as scoring:
        answer = await push(scoring, message(games.unit_codes[fed]))
        assert (answer.outcome, answer.reason, answer.actions) == ("accepted", "", 5)
        by_hand = [
            await scoring.act(scored, "s:1", "start_period"),
            await scoring.act(scored, "s:2", "goal", 1, player="9", minute=12),
            await scoring.act(scored, "s:3", "yellow_card", 2, player="4"),
            await scoring.act(scored, "s:4", "own_goal", 2, player="5", minute=41),
            await scoring.act(scored, "s:5", "end_period"),
        ]
        assert {a.outcome for a in by_hand} == {scoring_pb2.OUTCOME_SAVED}
        from_provider = await scoring.state(fed)
        from_scorer = await scoring.state(scored)
        again = await push(scoring, message(games.unit_codes[fed]))
    assert json.loads(from_provider.state_json) == json.loads(from_scorer.state_json)
    assert [s.score for s in from_provider.sides] == ["2", "0"]
    assert (again.outcome, again.actions) == ("duplicate", 0)
    rows = await db.fetch(
        "SELECT command_id, actor_kind, actor_name, source_code, screen FROM match_action "
        "WHERE unit_id = $1 ORDER BY seq",
        fed,
    )
    assert rows[1]["command_id"] == f"provider:odf-fbl:{games.unit_codes[fed]}:2"
    assert {(r["actor_kind"], r["actor_name"], r["source_code"], r["screen"]) for r in rows} == {
        ("provider", "provider:odf-fbl", "odf-fbl", "provider:odf:push")
    }
    kept = await db.fetch("SELECT body, outcome, actions FROM provider_message ORDER BY id")
    assert [bytes(k["body"]) for k in kept] == [message(games.unit_codes[fed])] * 2
    assert [(k["outcome"], k["actions"]) for k in kept] == [("accepted", 5), ("duplicate", 0)]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<OdfBody><Competition>", "the message is not well-formed XML (no element found"),
        (
            b'<!DOCTYPE x [<!ENTITY a "aaaa">]><OdfBody/>',
            "the message has a DOCTYPE (a DTD); ODF messages carry none",
        ),
        (b"<Results/>", "the root element is <Results>, not <OdfBody>"),
        (
            b'<OdfBody CompetitionCode="AG2026" DocumentType="DT_MEDALS"/>',
            "DocumentType 'DT_MEDALS' is not read here; omnium reads DT_PLAY_BY_PLAY",
        ),
    ],
)
async def test_a_malformed_message_is_kept_raw_and_refused_with_its_reason(
    db: asyncpg.Connection, database_url: str, body: bytes, reason: str
) -> None:
    await make_games(db, units=1)
    async with running_scoring(database_url) as scoring:
        answer = await push(scoring, body)
    assert answer.outcome == "refused" and answer.reason.startswith(reason)
    kept = await db.fetchrow("SELECT body, outcome, reason FROM provider_message")
    assert bytes(kept["body"]) == body
    assert (kept["outcome"], kept["reason"]) == ("refused", answer.reason)
    assert await db.fetchval("SELECT count(*) FROM match_action") == 0


async def test_a_message_breaking_the_rules_says_which_action(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    code = games.unit_codes[games.units[0]]
    text = SAMPLE.read_text().replace('Id="1" Action="PERIOD_START"', 'Id="1" Action="PERIOD_END"')
    unmapped = SAMPLE.read_text().replace('Action="GOAL"', 'Action="CORNER"')
    async with running_scoring(database_url) as scoring:
        answer = await push(scoring, message(code, text))
        wrong_key = await push(scoring, message(code), key="not-the-key")
        not_mapped = await push(scoring, message(code, unmapped))
    assert answer.outcome == "refused"
    assert answer.reason == (
        "Action Id 1 (end_period): no period is running: start period 1 first; "
        "0 new action(s) before it were saved"
    )
    assert (wrong_key.outcome, wrong_key.refused_for, wrong_key.message_id) == ("refused", "key", 0)
    assert wrong_key.reason.startswith("this is not the key of a provider here")
    assert not_mapped.reason.startswith("Action 'CORNER' (Id 2) is not mapped")


async def test_a_pull_provider_is_read_and_applied(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    body = message(games.unit_codes[games.units[0]]).replace(
        b'Action="YELLOW_CARD"', b'Action="GOAL"'
    )
    body = body.replace(b'Action="OWN_GOAL"', b'Action="GOAL"').replace(
        b'<Action Id="5" Action="PERIOD_END" Period="H1" Minute="45" Order="5"/>', b""
    )
    seen: list[str | None] = []

    async def serve(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(body=body, content_type="application/xml")

    app = web.Application()
    app.router.add_get("/odf.xml", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with running_scoring(database_url) as scoring:
            providers = scoring.app.providers
            assert providers is not None
            spec = providers.specs["odf-pull"]
            await providers.register(
                dataclasses.replace(spec, address=f"http://127.0.0.1:{port}/odf.xml")
            )
            async with httpx.AsyncClient() as http:
                first = await providers.pull_once("odf-pull", http)
                second = await providers.pull_once("odf-pull", http)
            state = await scoring.state(games.units[0])
    finally:
        await runner.cleanup()
    assert (first.outcome, first.actions) == ("accepted", 4)
    assert second.outcome == "duplicate"
    assert [s.score for s in state.sides] == ["1", "2"]
    assert seen[0] == httpx.BasicAuth("omnium", "pull-secret")._auth_header
    assert await db.fetchval(
        "SELECT last_pulled_at IS NOT NULL FROM provider WHERE code = 'odf-pull'"
    )


def test_a_bad_provider_file_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "odf-fbl.toml"
    path.write_text(
        (PROVIDERS / "odf-fbl.toml").read_text().replace('mode = "push"', 'mode = "both"')
    )
    with pytest.raises(ProviderFileError) as caught:
        load_provider_file(path)
    assert str(caught.value).endswith(
        "mode: is push (the provider POSTs to us) or pull (we read it)"
    )
