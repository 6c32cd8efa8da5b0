"""Feed documents, client settings and the approval command, without servers."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from google.protobuf import json_format, struct_pb2

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from omnium_command._parse import Refusal, parse_command
from omnium_delivery import ClientSettingsError, Document, check_client, render
from omnium_delivery._webhook import secret_key, sign

UNIT = "FBLMEVENT-------------FNL-00000001"
NOW = datetime(2026, 9, 20, 10, 15, 30, 123000, tzinfo=UTC)


def results_document() -> Document:
    sides = [
        {"order": 1, "competitor": "FBL-KOR", "name": "Korea", "noc": "KOR", "score": "2",
         "result": None, "rank": 1, "medal": None},
        {"order": 2, "competitor": "FBL-JPN", "name": "Japan & co", "noc": "JPN", "score": "1",
         "result": None, "rank": 2, "medal": None},
    ]  # fmt: skip
    unit = {"code": UNIT, "discipline": "FBL", "name": "Match 1", "phase": "Group A",
            "start_at": "2026-09-20T01:00:00+00:00", "venue": "Nagoya", "status": "OFFICIAL",
            "sides": sides}  # fmt: skip
    return Document("results", "AG2026", "FBL", None, [unit])


def test_odf_results_carry_document_type_version_and_every_side() -> None:
    body = render(results_document(), "odf", 7, NOW)
    root = ET.fromstring(body)
    assert root.tag == "OdfBody"
    assert root.get("DocumentType") == "DT_RESULT"
    assert root.get("Version") == "7"
    assert root.get("DocumentCode") == "FBL".ljust(34, "-")
    assert (root.get("Date"), root.get("Time")) == ("2026-09-20", "101530123")
    results = root.findall("./Competition/Unit/Results/Result")
    assert [(r.get("Result"), r.get("Rank")) for r in results] == [("2", "1"), ("1", "2")]
    names = [d.get("Name") for d in root.iter("Description")]
    assert names == ["Korea", "Japan & co"]


def test_the_content_hash_ignores_version_and_stamp_but_not_data() -> None:
    document = results_document()
    assert render(document, "odf", 1, NOW) != render(document, "odf", 2, NOW)
    same = results_document()
    assert document.content_sha("odf") == same.content_sha("odf")
    same.rows[0]["sides"][0]["score"] = "3"
    assert document.content_sha("odf") != same.content_sha("odf")
    assert document.content_sha("odf") != document.content_sha("json")


def test_csv_has_one_line_per_side_and_json_the_version() -> None:
    document = results_document()
    rows = list(csv.DictReader(io.StringIO(render(document, "csv", 1, NOW).decode())))
    assert [(r["side"], r["noc"], r["score"]) for r in rows] == [
        ("1", "KOR", "2"),
        ("2", "JPN", "1"),
    ]
    data = json.loads(render(document, "json", 4, NOW))
    assert (data["document_type"], data["version"]) == ("DT_RESULT", 4)


def test_file_names_follow_the_odf_scheme() -> None:
    medals = Document("medals", "AG2026", None, 5, [])
    assert medals.file_name("json") == f"AG2026_{'GLO':-<34}_DT_MEDALS_TOP5.json"
    assert results_document().file_name("odf") == f"AG2026_{'FBL':-<34}_DT_RESULT.xml"


def base_client(**over: Any) -> dict[str, Any]:
    return {
        "code": "dailyhunt",
        "event": "AG2026",
        "transport": "webhook",
        "webhook": {"url": "http://127.0.0.1:9/hook", "secret": "whsec_c2VjcmV0"},
        "feeds": [{"kind": "medals", "format": "json", "top": 5}],
        **over,
    }


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"code": "Daily Hunt"}, "client code 'Daily Hunt'"),
        ({"transport": "ftp"}, "transport 'ftp' is not one of sftp, webhook"),
        ({"feeds": []}, "list at least one feed"),
        ({"feeds": [{"kind": "weather"}]}, "kind 'weather' is not one of"),
        ({"feeds": [{"kind": "schedule", "format": "pdf"}]}, "format 'pdf'"),
        ({"feeds": [{"kind": "schedule", "top": 5}]}, "top (a whole number from 1)"),
        ({"webhook": {"url": "http://x"}}, "needs 'webhook'"),
        ({"transport": "sftp"}, "an sftp client needs an 'sftp' section"),
        (
            {"transport": "sftp", "sftp": {"host": "h", "username": "u", "password": "p"}},
            "sftp.host_key is needed",
        ),
        (
            {"transport": "sftp", "sftp": {"host": "h", "username": "u", "host_key": "nope"}},
            "sftp.host_key is not a public key",
        ),
    ],
)
def test_client_settings_mistakes_get_a_plain_answer(change: dict[str, Any], words: str) -> None:
    with pytest.raises(ClientSettingsError) as refused:
        check_client(base_client(**change))
    assert words in str(refused.value)


def test_a_webhook_client_merges_at_the_live_window_unless_told() -> None:
    assert check_client(base_client())["feeds"][0]["live"] is True
    told = base_client(feeds=[{"kind": "medals", "format": "json", "live": False}])
    assert check_client(told)["feeds"][0]["live"] is False


def test_the_signature_is_standard_webhooks() -> None:
    # The example from the Standard Webhooks specification.
    key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    body = b'{"test": 2432232314}'
    assert sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == (
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


def approve(payload: dict[str, Any]) -> command_pb2.Command:
    struct = struct_pb2.Struct()
    json_format.ParseDict(payload, struct)
    return command_pb2.Command(
        command_id="approve-1",
        code="results.approve",
        subject=command_pb2.Subject(kind="unit", code=UNIT, event_code="AG2026"),
        payload=struct,
        actor=actor_pb2.Actor(kind=actor_pb2.Actor.KIND_PERSON, name="Checker"),
    )


def test_results_approve_is_a_command_on_a_unit() -> None:
    request = parse_command(approve({}))
    (intent,) = request.intents
    assert (intent.kind, intent.ref_code, intent.approve) == ("unit", UNIT, True)
    with pytest.raises(Refusal, match="takes no payload"):
        parse_command(approve({"status": "OFFICIAL"}))
