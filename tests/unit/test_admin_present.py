"""What the console shows: green only when both lines are fine, run words and bars, the
chart, a held row's lookup read from its question, and where sign-in may send a person."""

from __future__ import annotations

from omnium.command.v1 import command_pb2
from omnium.imports.v1 import imports_pb2
from omnium_accounts.web import local_path
from omnium_admin import _present
from omnium_admin._views import _HELD, _local_id


def _integration(scout_ok: bool, ours_ok: bool) -> imports_pb2.Integration:
    return imports_pb2.Integration(
        code="scout-schedule",
        scout=imports_pb2.Health(word="Passed" if scout_ok else "Failed its checks", ok=scout_ok),
        omnium=imports_pb2.Health(word="On time" if ours_ok else "Late", ok=ours_ok),
    )


def test_a_card_is_green_only_when_scout_and_omnium_are_both_fine() -> None:
    assert _present.card(_integration(True, True))["green"] is True
    assert _present.card(_integration(False, True))["green"] is False
    assert _present.card(_integration(True, False))["green"] is False


def test_a_card_with_no_run_yet_is_waiting_only_while_its_first_is_not_due() -> None:
    def card(word: str, *alerts: str) -> dict[str, object]:
        return _present.card(
            imports_pb2.Integration(
                code="scout-medals",
                scout=imports_pb2.Health(word="No run yet", ok=False),
                omnium=imports_pb2.Health(word=word, ok=False),
                open_alerts=[imports_pb2.Alert(kind=k, message=k) for k in alerts],
            )
        )

    waiting = card("Not due yet")
    assert (waiting["green"], waiting["starting"], waiting["verdict"]) == (
        False,
        True,
        "Waiting for its first run",
    )
    for late in (card("Late"), card("Not due yet", "run_failed")):
        assert (late["starting"], late["verdict"]) == (False, "Needs a look")


def test_a_row_links_to_the_unit_its_changes_were_written_to() -> None:
    def entry(kind: str, subject_id: str) -> imports_pb2.RowEntry:
        change = command_pb2.FieldChange(subject_kind=kind, subject_id=subject_id, field="x")
        return imports_pb2.RowEntry(key="k", kept_by_hand=[change])

    unit, medal = _present.rows([entry("unit", "u-1"), entry("medal_row", "m-1")], 10)
    assert (unit["unit_id"], medal["unit_id"]) == ("u-1", "")


def test_a_running_run_shows_its_batches() -> None:
    run = _present.run(
        imports_pb2.Run(id="r1", status="applying", batch_total=4, batch_done=3, row_count=90)
    )
    assert (run["word"], run["running"], run["percent"]) == ("Running", True, 75)
    done = _present.run(imports_pb2.Run(id="r2", status="paused_by_guard", duration_ms=1500))
    assert (done["word"], done["running"], done["took"]) == ("Paused by a check", False, "1.5 s")


def test_the_chart_puts_the_oldest_run_left_and_marks_runs_not_done() -> None:
    runs = [
        _present.run(imports_pb2.Run(id=str(n), status=s, row_count=rows, duration_ms=ms))
        for n, (s, rows, ms) in enumerate(
            [("failed", 0, 100), ("done", 1252, 4000), ("applying", 10, 0)]
        )
    ]
    chart = _present.chart(runs)
    assert [b["bad"] for b in chart["bars"]] == [False, True]  # the running run is left out
    assert chart["bars"][0]["rows_h"] > 0 and chart["bars"][1]["rows_h"] == 0
    assert chart["max_rows"] == 1252 and chart["max_took"] == "4.0 s"
    assert _present.chart([])["bars"] == []


def test_a_held_question_names_the_lookup_to_add() -> None:
    question = (
        "Scout names competitor SC-T-KOR3 (Korea B, KOR) in unit SC-000002; we have no such "
        "competitor. Add it, or map SC-T-KOR3 to one we have."
    )
    found = _HELD.search(question)
    assert found is not None and found.groups() == ("competitor", "SC-T-KOR3")


def test_sign_in_sends_a_person_only_to_our_own_pages() -> None:
    assert local_path("/runs?integration=x") == "/runs?integration=x"
    for bad in ("https://evil.example/", "//evil.example/", "/\\evil", "", None):
        assert local_path(bad) == "/"


def test_a_form_s_command_id_is_kept_so_a_resend_is_one_change() -> None:
    kept = "admin:0b0f8f4e-5d7c-4d7e-9b1a-3f7e2c1d9a00"
    assert _local_id(kept) == kept
    assert _local_id(kept + "-2") == kept + "-2"
    assert _local_id("anything else").startswith("admin:")
    assert _local_id("anything else") != "anything else"
