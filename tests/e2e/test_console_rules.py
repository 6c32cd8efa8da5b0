"""The console's copy of the rules (rules.js, in Chromium) gives what the server's gives."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from playwright.async_api import async_playwright

from omnium_scorer_web._routes import STATIC
from omnium_sports import SPORTS_DIR, ActionRefused, Sport, load_sports

pytestmark = pytest.mark.e2e
SPORTS = load_sports(SPORTS_DIR)
STEPS = 400


def random_action(sport: Sport, sides: int, rng: random.Random) -> dict[str, Any]:
    names = list(sport.actions)
    # Clock actions (start, end) less often, so matches last long enough to test scoring.
    weights = [1 if sport.actions[n].group == "clock" else 100 for n in names]
    rule = sport.actions[rng.choices(names, weights)[0]]
    fields: dict[str, Any] = {}
    for field in rule.fields.values():
        if rng.random() < 0.15:
            continue
        if field.type == "choice":
            fields[field.name] = rng.choice(field.choices)
        elif field.type == "int":
            fields[field.name] = rng.randint(int(field.minimum or 0), int(field.maximum or 10))
        elif field.type == "number":
            fields[field.name] = round(rng.uniform(0, float(field.maximum or 10)), 2)
        else:
            fields[field.name] = str(rng.randint(1, 6))
    side = rng.randint(1, sides) if rule.takes_side else None
    tapped = 1_790_000_000_000 + rng.randint(0, 7_200_000)  # ms, as the console keeps it
    return {"kind": rule.name, "side": side, "fields": fields, "client_at": tapped,
            "at": tapped / 1000}  # fmt: skip


def random_actions(sport: Sport, sides: int, rng: random.Random) -> list[dict[str, Any]]:
    """What a scorer might send: mostly actions the rules take now, one in five anything."""
    state = sport.new_state(sides)
    actions = []
    for _ in range(STEPS):
        action = random_action(sport, sides, rng)
        if rng.random() < 0.8:
            for _ in range(30):
                try:
                    state = sport.apply(state, action)
                    break
                except ActionRefused:
                    action = random_action(sport, sides, rng)
        actions.append(action)
    return actions


def python_steps(sport: Sport, sides: int, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    state = sport.new_state(sides)
    steps = []
    for action in actions:
        try:
            state = sport.apply(state, action)
            refused = ""
        except ActionRefused as exc:
            refused = str(exc)
        steps.append(
            {
                "refused": refused,
                "sides": [
                    [v["score"], v.get("result", ""), v.get("rank") or 0]
                    for v in sport.side_values(state)
                ],
                "finished": state["finished"],
                "winner": state["winner"],
                "match": state["match"],
            }
        )
    return steps


JS = """
async ([sport, sides, actions]) => {
  const rules = await import('/score/static/rules.js');
  let state = rules.newState(sport, sides);
  const steps = [];
  for (const action of actions) {
    let refused = "";
    try {
      state = rules.apply(sport, state, action);
    } catch (e) {
      if (!(e instanceof rules.RuleRefused)) throw e;
      refused = e.message;
    }
    steps.push({
      refused,
      sides: rules.sideValues(sport, state).map((v) => [v.score, v.result, v.rank]),
      finished: state.finished,
      winner: state.winner,
      match: state.match,
    });
  }
  return steps;
}
"""


@pytest.fixture
async def static_site() -> AsyncIterator[str]:
    async def blank(request: web.Request) -> web.Response:
        return web.Response(text="<!doctype html><title>rules</title>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", blank)
    app.router.add_static("/score/static", STATIC)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


async def test_the_console_applies_every_sport_exactly_as_the_server(static_site: str) -> None:
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
        )
        page = await browser.new_page()
        await page.goto(static_site)
        for code, sport in sorted(SPORTS.items()):
            sides = sport.sides or 8
            actions = random_actions(sport, sides, random.Random(f"{code}-20261130"))
            expected = python_steps(sport, sides, actions)
            # The same JSON the service sends the console.
            described = json.loads(json.dumps(sport.describe()))
            got = await page.evaluate(JS, [described, sides, actions])
            for number, (ours, theirs) in enumerate(zip(expected, got, strict=True)):
                assert theirs == ours, f"{code}, step {number}: {actions[number]}"
            accepted = sum(1 for s in expected if not s["refused"])
            assert accepted > 20, f"{code}: too few actions were accepted to test anything"
        await browser.close()
