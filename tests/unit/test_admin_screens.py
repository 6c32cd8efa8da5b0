"""Every screen in every state it must handle, rendered from its template: loading and failed
to read (the live part), empty, running, partly done, paused by a check with Start, and off."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from omnium.imports.v1 import imports_pb2
from omnium_accounts import Account, Session
from omnium_admin import _present
from omnium_admin._app import make_templates, render
from omnium_settings import Settings

SETTINGS = Settings.from_env({})
OPERATOR = Session(
    "t", Account(uuid.uuid4(), "ana", "Ana", "operator"), "csrf-1", "admin", datetime.now(UTC)
)


def _screen(name: str, *, may_act: bool = True, **context: Any) -> str:
    return render(
        make_templates(),
        SETTINGS,
        name,
        session=OPERATOR,
        may_act=may_act,
        path="/x",
        said="",
        screen="x",
        **context,
    )


def _run(status: str, **fields: Any) -> dict[str, Any]:
    return _present.run(imports_pb2.Run(id=str(uuid.uuid4()), status=status, **fields))


def _card(state: str, word: str, last: imports_pb2.Run | None = None) -> dict[str, Any]:
    return _present.card(
        imports_pb2.Integration(
            code="scout-schedule",
            name="Scout: schedule",
            state=state,
            scout=imports_pb2.Health(word="Passed", ok=True),
            omnium=imports_pb2.Health(word=word, ok=word == "On time"),
            last_run=last,
        )
    )


def test_integrations_empty_off_paused_and_stopped_by_a_check() -> None:
    assert "No integrations yet" in _screen("integrations.html", cards=[])
    off = _screen("integrations.html", cards=[_card("off", "Off")])
    assert "Off" in off and "Resume" in off and "No runs yet." in off
    paused = _screen("integrations.html", cards=[_card("paused", "Paused")])
    assert "Paused" in paused and "Resume" in paused and "Pause</button>" not in paused
    guard = imports_pb2.Run(id=str(uuid.uuid4()), status="paused_by_guard", reason="too few")
    stopped = _screen("integrations.html", cards=[_card("on", "Stopped by a check", guard)])
    assert "Paused by a check: too few" in stopped and ">Start</button>" in stopped
    assert 'class="card not-green' in stopped
    # The live part's loading and failed-to-read line, with its Try again, is on the page.
    assert "data-live-status" in off and "Try again" in off


def test_a_viewer_sees_no_actions() -> None:
    page = _screen("integrations.html", may_act=False, cards=[_card("on", "On time")])
    assert "Run now" not in page and "Pause" not in page


def test_runs_empty_running_partly_done_and_paused_by_a_check() -> None:
    card = _card("on", "On time")
    empty = _screen("runs.html", cards=[card], chosen=card, runs=[], chart=_present.chart([]))
    assert "No runs yet." in empty
    running = _run("applying", batch_total=4, batch_done=1, row_count=1252)
    guard = _run("paused_by_guard", reason="Scout sent 100 rows; it usually sends about 1,252")
    partly = _run("partly_done", reason="batch 3 failed 3 times", row_count=1252)
    page = _screen(
        "runs.html",
        cards=[card],
        chosen=card,
        runs=[guard, running, partly],
        chart=_present.chart([guard, running, partly]),
    )
    assert "Paused by a check: Scout sent 100 rows" in page and ">Start</button>" in page
    assert 'max="4" value="1"' in page and "1 / 4" in page and "Running" in page
    assert "Partly done" in page and "batch 3 failed 3 times" in page


def test_a_run_page_partly_done_failed_and_paused() -> None:
    for status, words in (
        ("partly_done", "Partly done: some batches were not written"),
        ("failed", "Nothing from this run was written"),
        ("paused_by_guard", ">Start</button>"),
    ):
        page = _screen(
            "run.html",
            run=_run(status, reason="why"),
            changed=[],
            kept=[],
            held=[],
            refused=[],
            counts={"changed": 0, "kept": 0, "held": 0, "refused": 0},
            limit=100,
        )
        assert words in page, status
        assert page.count("None.") == 4


def test_waiting_for_you_empty() -> None:
    groups: dict[str, list[Any]] = {"held": [], "guard": [], "missing": []}
    assert "Nothing is waiting for you." in _screen("waiting.html", groups=groups, total=0)


def test_what_a_page_shows_is_escaped() -> None:
    card = _card("on", "On time")
    card["name"] = "<script>alert(1)</script>"
    page = _screen("integrations.html", cards=[card])
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page
