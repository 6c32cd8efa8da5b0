"""Every screen in every state it must handle, rendered from its template: loading and failed
to read (the live part), empty, running, partly done, paused by a check with Start, and off."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from omnium.command.v1 import command_pb2
from omnium.imports.v1 import imports_pb2
from omnium_accounts import Account, Session
from omnium_admin import _names, _present
from omnium_admin._console import make_templates, render
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


def _card(
    state: str,
    word: str,
    last: imports_pb2.Run | None = None,
    paused: imports_pb2.Run | None = None,
) -> dict[str, Any]:
    return _present.card(
        imports_pb2.Integration(
            code="scout-schedule",
            name="Scout: schedule",
            state=state,
            scout=imports_pb2.Health(word="Passed", ok=True),
            omnium=imports_pb2.Health(word=word, ok=word == "On time"),
            last_run=last,
            paused_run=paused,
        )
    )


def test_integrations_empty_off_paused_and_stopped_by_a_check() -> None:
    assert "No integrations yet" in _screen("integrations.html", cards=[])
    off = _screen("integrations.html", cards=[_card("off", "Off")])
    assert "Off" in off and "Resume" in off and "No runs yet." in off
    paused = _screen("integrations.html", cards=[_card("paused", "Paused")])
    assert "Paused" in paused and "Resume" in paused and "Pause</button>" not in paused
    guard = imports_pb2.Run(id=str(uuid.uuid4()), status="paused_by_guard", reason="too few")
    stopped = _screen("integrations.html", cards=[_card("on", "Stopped by a check", guard, guard)])
    assert "Paused by a check (" in stopped and "): too few" in stopped
    assert ">Start</button>" in stopped
    assert 'class="card not-green' in stopped
    # The live part's loading and failed-to-read line, with its Try again, is on the page.
    assert "data-live-status" in off and "Try again" in off


def test_a_viewer_sees_no_actions() -> None:
    page = _screen("integrations.html", may_act=False, cards=[_card("on", "On time")])
    assert "Run now" not in page and "Pause" not in page


def test_runs_empty_running_partly_done_and_paused_by_a_check() -> None:
    card = _card("on", "On time")
    empty = _screen(
        "runs.html", cards=[card], chosen=card, runs=[], chart=_present.chart([]), picked=False
    )
    assert "No runs yet." in empty
    running = _run("applying", batch_total=4, batch_done=1, row_count=1252)
    paused = imports_pb2.Run(
        id=str(uuid.uuid4()),
        status="paused_by_guard",
        build="all",
        reason="Scout sent 100 rows; it usually sends about 1,252",
    )
    guard = _present.run(paused)
    card = _card("on", "Stopped by a check", paused, paused)
    partly = _run("partly_done", reason="batch 3 failed 3 times", row_count=1252)
    page = _screen(
        "runs.html",
        cards=[card],
        chosen=card,
        runs=[guard, running, partly],
        chart=_present.chart([guard, running, partly]),
        picked=False,
    )
    assert "): Scout sent 100 rows" in page and ">Start</button>" in page
    # The banner says why once; the run's row does not say it again.
    assert page.count("Scout sent 100 rows") == 1
    assert "full run" in page
    assert 'max="4" value="1"' in page and "1 / 4" in page and "Running" in page
    assert "Partly done" in page and "batch 3 failed 3 times" in page


def test_a_run_page_partly_done_failed_and_paused() -> None:
    for status, words in (
        ("partly_done", "Partly done: why The rows written are listed below."),
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
    page = _screen("waiting.html", groups=groups, total=0, error="", asked={})
    assert "Nothing is waiting for you." in page


def test_what_a_page_shows_is_escaped() -> None:
    card = _card("on", "On time")
    card["name"] = "<script>alert(1)</script>"
    page = _screen("integrations.html", cards=[card])
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page


def test_a_card_just_added_waits_for_its_first_run_and_does_not_ask_for_a_look() -> None:
    fresh = _present.card(
        imports_pb2.Integration(
            code="scout-medals",
            name="Scout: medal table",
            state="on",
            scout=imports_pb2.Health(word="No run yet", ok=False),
            omnium=imports_pb2.Health(word="Not due yet", ok=False, detail="due within 60 s"),
        )
    )
    page = _screen("integrations.html", cards=[fresh])
    assert "Waiting for its first run" in page and "Needs a look" not in page
    assert 'class="card not-green starting state-on"' in page
    # Neither line is in red: nothing is wrong, nothing is in yet.
    assert page.count('class="health waiting"') == 2 and 'class="health bad"' not in page
    late = _screen("integrations.html", cards=[_card("on", "Late")])
    assert "Needs a look" in late and 'class="health bad"' in late


def _row(key: str, unit_id: str, kind: str = "unit") -> imports_pb2.RowEntry:
    change = command_pb2.FieldChange(subject_kind=kind, subject_id=unit_id, field="venue")
    return imports_pb2.RowEntry(position=3, key=key, outcome="accepted", changes=[change])


def test_a_changed_row_links_to_its_unit_s_page() -> None:
    unit_id = str(uuid.uuid4())
    rows = _present.rows([_row("SC-000123", unit_id), _row("KOR", "", "medal_row")], 10)
    unit = _names.unit_words(
        {
            "id": unit_id,
            "code": "FBLMTEAM11------------GPA-000100--",
            "name": "Men's Group A match 1",
            "discipline": "FBL",
            "sides": ["Korea", "Japan"],
            "start_at": None,
        }
    )
    changed = _names.name_rows(rows, {}, {unit_id: unit})
    page = _screen(
        "run.html",
        run=_run("done"),
        changed=changed,
        kept=[],
        held=[],
        refused=[],
        counts={"changed": 2, "kept": 0, "held": 0, "refused": 0},
        limit=100,
    )
    # Named as a person knows it, Scout's key one click away.
    assert f'<a href="/units/{unit_id}" data-unit-link>Men&#39;s Group A match 1</a>' in page
    assert "FBL · Korea v Japan" in page
    assert "<summary>Scout's key</summary><code data-key>SC-000123</code>" in page
    # A medal row has no unit page: its key is shown as it is.
    assert "<code data-key>KOR</code>" in page


def test_a_unit_s_page_shows_its_sides_pins_and_offers_to_unpin_them() -> None:
    unit = {
        "id": str(uuid.uuid4()),
        "code": "ATHM100M--------------FNL-000100--",
        "name": "Men's 100m Final",
        "discipline": "ATH",
        "event_code": "AG2026",
        "updated_at": datetime.now(UTC),
        "pinned": ["venue"],
    }
    sides = [
        {"sort_order": 1, "competitor_name": "A", "competitor_code": "SC-P-1", "score": None,
         "result": "10.01", "rank": 1, "medal": "GOLD", "pinned": ["result", "medal"]},
        {"sort_order": 2, "competitor_name": "B", "competitor_code": "SC-P-2", "score": None,
         "result": "10.20", "rank": 2, "medal": "SILVER", "pinned": []},
    ]  # fmt: skip
    context: dict[str, Any] = {
        "unit": unit,
        "values": dict.fromkeys(("name", "phase", "start_at", "venue", "status"), ""),
        "fields": ("name", "phase", "start_at", "venue", "status"),
        "statuses": ("SCHEDULED",),
        "sides": sides,
        "pins": ["venue", "sides[1].result", "sides[1].medal"],
        "history": [],
        "command_id": "admin:1",
    }
    page = _screen("unit.html", **context)
    for name in ("venue", "sides[1].result", "sides[1].medal"):
        assert f'aria-label="Unpin {name}"' in page
        assert f'name="field" value="{name}"' in page
    side_one = page[page.index('data-side="1"') : page.index('data-side="2"')]
    assert side_one.count("(set by hand)") == 2
    assert "(set by hand)" not in page[page.index('data-side="2"') :].split("</table>")[0]
    # A viewer sees the pins, not the buttons.
    viewer = _screen("unit.html", may_act=False, **context)
    assert "(set by hand)" in viewer and "Unpin" not in viewer


def test_a_paused_run_page_says_nothing_was_written_once() -> None:
    reason = "Scout sent 1 row; it usually sends about 14. Nothing from this run was written."
    page = _screen(
        "run.html",
        run=_run("paused_by_guard", reason=reason),
        changed=[],
        kept=[],
        held=[],
        refused=[],
        counts={"changed": 0, "kept": 0, "held": 0, "refused": 0},
        limit=100,
    )
    banner = page.split('class="banner guard"', 1)[1].split("</p>", 1)[0]
    assert banner.count("Nothing from this run was written") == 1 and ".." not in banner
