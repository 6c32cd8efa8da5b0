"""The files the imports command line takes, checked before anything is written: each problem
names its file, line and field, and says what to do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from omnium_imports._files import (
    INTEGRATION_SETTINGS,
    integration_from,
    lookups_from,
    mapping_file,
    mapping_from,
)
from omnium_imports._inputs import Document, SetupError, read_document
from omnium_imports._reference import check_reference, unread_fields
from omnium_scout_sim import ScoutSimulator

EXAMPLES = Path(__file__).resolve().parents[2] / "services" / "imports" / "examples"


def _doc(name: str, text: str, folder: Path = EXAMPLES) -> Document:
    return Document(name, text, folder)


def _problems(exc: pytest.ExceptionInfo[SetupError]) -> list[str]:
    return [str(p) for p in exc.value.problems]


# -- the reference ------------------------------------------------------------------------------


def test_the_example_reference_and_the_simulator_s_pass() -> None:
    example = read_document(str(EXAMPLES / "reference.json")).json()
    assert check_reference(example) == []
    assert unread_fields(example) == []
    served = ScoutSimulator().reference()
    assert check_reference(served) == []
    assert unread_fields(served) == ["nocs", "units", "scout"]


BAD_REFERENCE = """{
  "event": {
    "code": "ag2026",
    "name": "Aichi-Nagoya 2026",
    "timeZone": "Asia/Nagoya"
  },
  "disciplines": [{"code": "ATH", "name": "Athletics"}, {"code": "ATH", "name": "Again"}],
  "competitors": [
    {"externalId": "SC-P-00001", "name": "SALEH Dana", "noc": "UZB", "discipline": "ATH"},
    {"externalId": "SC-P-00002",
     "name": "HOSSEINI Nilufar",
     "noc": "Uzbekistan",
     "discipline": "SWM"},
    {"externalId": "SC-P-00001", "noc": "UZB", "kind": "tema"}
  ]
}
"""


def test_a_reference_s_problems_name_the_line_and_the_field() -> None:
    doc = _doc("reference.json", BAD_REFERENCE)
    problems = [str(p) for p in doc.located(check_reference(doc.json()))]
    assert problems == [
        "reference.json, line 3 (event.code): the event's code 'ag2026' must be 2 to 32 capital "
        "letters, digits, - or _, like AG2026",
        "reference.json, line 5 (event.timeZone): 'Asia/Nagoya' is not a time zone name; use an "
        "IANA name like 'Asia/Tokyo'",
        "reference.json, line 7 (disciplines[1].code): discipline ATH is listed twice",
        "reference.json, line 12 (competitors[1].noc): the NOC 'Uzbekistan' must be three "
        "capital letters, like KOR",
        "reference.json, line 13 (competitors[1].discipline): discipline 'SWM' is not one of "
        "the reference's disciplines (ATH)",
        "reference.json, line 14 (competitors[2].externalId): SC-P-00001 is listed twice "
        "(also competitors[0])",
        "reference.json, line 14 (competitors[2]): it has no 'name'",
        "reference.json, line 14 (competitors[2].kind): kind 'tema' is not one we know; use "
        "team, person, athlete, pair (team is a team, the others one person)",
    ]


def test_a_file_that_is_not_json_names_the_line_and_column() -> None:
    doc = _doc("reference.json", '{\n  "event": {"code": "AG2026",}\n}\n')
    with pytest.raises(SetupError) as refused:
        doc.json()
    (problem,) = _problems(refused)
    assert problem.startswith("reference.json, line 2: this is not JSON: Expecting property name")
    assert "(column 30)" in problem


def test_a_reference_that_is_not_one_says_what_it_needs() -> None:
    assert [str(p) for p in check_reference([])] == [
        "a reference is an object with event, disciplines and competitors, not a list"
    ]
    assert [str(p) for p in check_reference({"event": {"code": "AG2026"}})] == [
        "the reference has no 'disciplines'; it needs a list like "
        '[{"code": "ATH", "name": "Athletics"}]',
        "the reference has no 'competitors'; it needs a list like "
        '[{"externalId": "SC-P-00001", "name": "...", "noc": "KOR"}]',
        "event: it has no 'name'",
        "event: it has no 'timeZone'",
    ]


def test_a_missing_file_is_said_plainly(tmp_path: Path) -> None:
    with pytest.raises(SetupError) as refused:
        read_document(str(tmp_path / "nowhere.json"))
    assert _problems(refused) == [f"{tmp_path / 'nowhere.json'}: there is no such file"]


# -- the integration ----------------------------------------------------------------------------


def test_the_example_integration_is_read_and_starts_paused() -> None:
    spec = integration_from(read_document(str(EXAMPLES / "integration.json")))
    assert (spec.code, spec.event_code, spec.target, spec.job) == (
        "games-schedule",
        "AG2026",
        "unit",
        "schedule",
    )
    assert spec.state == "paused"
    assert spec.creates_units is True
    assert spec.mapping == mapping_file("scout_units")


def test_an_integration_s_problems_are_all_named_with_their_lines(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("")
    text = """{
  "code": "Games Schedule",
  "event": "AG2026",
  "name": "Scout",
  "scout_url": "scout.example.org",
  "scout_job": "schedule",
  "secret_file": "secret",
  "mapping": "scout_unit",
  "chek_seconds": 60
}
"""
    with pytest.raises(SetupError) as refused:
        integration_from(_doc("integration.json", text, tmp_path))
    assert _problems(refused) == [
        "integration.json, line 9 (chek_seconds): there is no field 'chek_seconds' here; the "
        "fields are code, event, name, scout_url, scout_job, secret, secret_file, mapping, "
        "target, creates_units, check_seconds, state, settings",
        "integration.json, line 2 (code): code 'Games Schedule' must be 2 to 63 small letters, "
        "digits or -, starting with a letter or digit, like games-schedule",
        "integration.json, line 5 (scout_url): scout_url 'scout.example.org' must be Scout's "
        "base URL, like https://scout.example.org",
        f"integration.json, line 7 (secret_file): {tmp_path / 'secret'} holds no secret of 8 or "
        "more characters",
        "integration.json, line 8 (mapping): 'scout_unit' is not a default mapping "
        "(scout_medals, scout_units); a mapping file's name ends in .json",
    ]


def test_an_integration_s_own_settings_are_read_and_unknown_ones_refused_by_name() -> None:
    base = {
        "code": "games-schedule",
        "event": "AG2026",
        "name": "Scout",
        "scout_url": "http://127.0.0.1:8090",
        "scout_job": "schedule",
        "secret": "a-long-enough-secret",
        "mapping": "scout_units",
    }
    good = {"max_cleared": 40, "min_share": 0.3, "auto_cancel_missing": True}
    spec = integration_from(_doc("integration.json", json.dumps({**base, "settings": good})))
    assert spec.settings == good
    assert spec.check_seconds is None  # the service's OMNIUM_CHECK_SECONDS when it is added
    bad = {"max_clear": 40, "min_share": 3, "auto_cancel_missing": "yes"}
    with pytest.raises(SetupError) as refused:
        integration_from(_doc("integration.json", json.dumps({**base, "settings": bad})))
    assert [p.split(": ", 1)[1] for p in _problems(refused)] == [
        "there is no setting 'max_clear'; the settings are min_share, usual_runs, "
        "max_not_placed, max_refused, max_cleared, max_reopened, missing_runs_to_review, "
        "auto_cancel_missing, alert_scout_failed_in_row, alert_batch_failed_times, "
        "alert_quiet_intervals",
        "min_share (share of the usual rows below which a run pauses) must be a number from 0 "
        "to 1, not 3",
        "auto_cancel_missing (cancel missing records without asking) must be true or false, "
        "not 'yes'",
    ]


def test_a_mapping_file_s_problem_names_the_step_s_line(tmp_path: Path) -> None:
    mapping = mapping_file("scout_units")
    each = next(s for s in mapping["steps"] if s["op"] == "each")
    lookup = next(s for s in each["steps"] if s["op"] == "lookup")
    lookup["kind"] = "team"
    (tmp_path / "my-mapping.json").write_text(json.dumps(mapping, indent=2))
    text = json.dumps(
        {
            "code": "games-schedule",
            "event": "AG2026",
            "name": "Scout",
            "scout_url": "http://127.0.0.1:8090",
            "scout_job": "schedule",
            "secret": "a-long-enough-secret",
            "mapping": "my-mapping.json",
        }
    )
    with pytest.raises(SetupError) as refused:
        integration_from(_doc("integration.json", text, tmp_path))
    (problem,) = _problems(refused)
    lines = (tmp_path / "my-mapping.json").read_text().splitlines()
    kind_line = next(n for n, text in enumerate(lines, 1) if '"kind": "team"' in text)
    # The inner step's own line: where its "{" opens, above its "kind".
    step_line = max(n for n in range(1, kind_line) if lines[n - 1].strip() == "{")
    assert problem == (
        f"{tmp_path / 'my-mapping.json'}, line {step_line} (steps[10].steps[2]): step 11 "
        "(each), inner step 3 (lookup): 'kind' 'team' is not one we look up; use competitor "
        "or unit"
    )


def test_a_mapping_s_target_and_the_integration_s_must_agree() -> None:
    text = json.dumps(
        {
            "code": "games-medals",
            "event": "AG2026",
            "name": "Scout: medals",
            "scout_url": "http://127.0.0.1:8090",
            "scout_job": "medals",
            "secret": "a-long-enough-secret",
            "mapping": "scout_medals",
            "target": "unit",
            "creates_units": True,
        },
        indent=1,
    )
    with pytest.raises(SetupError) as refused:
        integration_from(_doc("medals.json", text))
    assert _problems(refused) == [
        "medals.json, line 9 (target): target 'unit' differs from the mapping's target "
        "'medal_row'; leave target out, or make them the same",
        "medals.json, line 10 (creates_units): only a unit integration creates units",
    ]


def test_a_broken_mapping_file_is_refused_naming_the_top_field() -> None:
    with pytest.raises(SetupError) as refused:
        mapping_from(_doc("m.json", '{\n  "target": "units",\n  "steps": []\n}'))
    assert _problems(refused) == [
        "m.json, line 2 (target): the mapping's target must be unit or medal_row, not 'units'"
    ]


# -- lookups ------------------------------------------------------------------------------------


def test_the_example_lookups_are_read() -> None:
    lines = lookups_from(read_document(str(EXAMPLES / "lookups.csv")))
    assert [(x.kind, x.scout_id, x.ours, x.line) for x in lines] == [
        ("competitor", "SC-T-KOR3", "SC-T-0002", 2),
        ("competitor", "SC-P-77777", "SC-P-00003", 3),
    ]


def test_lookup_lines_with_problems_are_named_by_line_and_column() -> None:
    text = (
        "kind,scout_id,ours\n"
        "competitor,SC-P-1,KOR-1\n"
        "team,SC-P-2,KOR-2\n"
        "\n"
        "competitor,SC-P-1,KOR-9\n"
        "unit,,X\n"
        "unit,SC-000001\n"
    )
    with pytest.raises(SetupError) as refused:
        lookups_from(_doc("lookups.csv", text))
    assert _problems(refused) == [
        "lookups.csv, line 3 (kind): kind 'team' is not one we look up; use competitor or unit",
        "lookups.csv, line 5 (scout_id): competitor SC-P-1 is given twice, as 'KOR-1' (line 2) "
        "and as 'KOR-9'; keep one",
        "lookups.csv, line 6 (scout_id): scout_id is empty: give Scout's id",
        "lookups.csv, line 7: it has 2 values; the first line names 3",
    ]


def test_a_lookups_file_without_its_columns_says_which() -> None:
    with pytest.raises(SetupError) as refused:
        lookups_from(_doc("lookups.csv", "scout,ours\nSC-P-1,KOR-1\n"))
    assert _problems(refused) == [
        "lookups.csv, line 1 (scout): there is no column 'scout'; the columns are kind, "
        "scout_id, ours, name, note",
        "lookups.csv, line 1: the first line must name the columns, with 'scout_id' among "
        "them, like scout_id,ours",
    ]


def test_lookups_in_json_name_the_field() -> None:
    text = '{\n  "competitor": {"SC-P-1": "KOR-1"},\n  "unit": {\n    "SC-000001": ""\n  }\n}'
    with pytest.raises(SetupError) as refused:
        lookups_from(_doc("lookups.json", text))
    assert _problems(refused) == [
        "lookups.json, line 4 (unit.SC-000001): ours is '': give our code or our id"
    ]


def test_the_settings_column_names_every_key_an_integration_file_may_set() -> None:
    """The database's own description of integration.settings (its newest COMMENT) names the
    keys the integration file takes, no more and no fewer: a DBA reads the schema, not _files."""
    migrations = Path(__file__).resolve().parents[2] / "libs" / "omnium_db" / "migrations"
    comments = [
        m
        for path in sorted(migrations.glob("*.sql"))
        for m in re.findall(
            r"COMMENT ON COLUMN integration\.settings IS\s+((?:'[^']*'\s*)+);", path.read_text()
        )
    ]
    text = "".join(re.findall(r"'([^']*)'", comments[-1]))
    named = set(re.findall(r"[a-z_]+", text.split(":", 1)[1].split(".")[0]))
    assert named == set(INTEGRATION_SETTINGS)
