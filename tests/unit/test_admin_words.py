"""The console's words for what a person knows: fields by team, times in the event's zone with
UTC on hover, why a run has no rows, and each delivery figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from omnium.delivery.v1 import delivery_pb2
from omnium.imports.v1 import imports_pb2
from omnium_admin import _names, _present, _times
from omnium_admin._console import make_templates

TOKYO = _times.zone_named("Asia/Tokyo")
NOON_UTC = datetime(2026, 9, 21, 3, 0, 0, tzinfo=UTC)  # 12:00 in Tokyo


def test_a_side_s_field_is_named_by_its_team_or_its_number() -> None:
    assert _names.field_words("sides[2].score", ["Japan", "Korea"]) == "Korea score"
    assert _names.field_words("sides[3].result", ["Japan", "Korea"]) == "side 3 result"
    assert _names.field_words("sides[1].competitor_id", None) == "side 1 competitor"
    assert _names.field_words("start_at") == "start time"
    assert _names.field_words("venue") == "venue"


def test_a_time_is_the_event_s_own_with_utc_on_hover() -> None:
    shown = str(_times.shown(NOON_UTC, TOKYO))
    assert ">21 Sep 12:00:00 JST</time>" in shown
    assert 'title="21 Sep 2026 03:00:00 UTC"' in shown
    # The live parts send ISO text: the same helper reads it.
    assert _times.shown(NOON_UTC.isoformat(), TOKYO) == _times.shown(NOON_UTC, TOKYO)
    assert _times.zone_named("Not/AZone") is UTC
    old = _times.ago(NOON_UTC, TOKYO, now=NOON_UTC + timedelta(days=3))
    assert old == "21 Sep 12:00 JST"


def test_every_template_time_goes_through_the_one_helper() -> None:
    templates = make_templates()
    page = templates.from_string("{{ t|at }} / {{ t|ago }}").render(t=NOON_UTC, zone=TOKYO)
    assert "12:00:00 JST" in page and "UTC" in page
    assert "clock" not in templates.filters


def test_a_run_with_no_rows_says_why() -> None:
    done = _present.run(imports_pb2.Run(id="r", status="done", row_count=0))
    assert done["rows_why"] == "Scout sent no rows in this run (nothing to read yet)"
    failed = _present.run(imports_pb2.Run(id="r", status="scout_failed"))
    assert "failed its own checks" in failed["rows_why"]
    assert _present.run(imports_pb2.Run(id="r", status="done", row_count=9))["rows_why"] == ""


def _client(sends: int, within: int, kept: bool, delivered_ago: float | None) -> dict[str, object]:
    promise = delivery_pb2.Promise(
        target_seconds=2.0,
        window_seconds=300,
        sends=sends,
        within_target=within,
        share=within / sends if sends else 1.0,
        kept=kept,
        misses=sends - within,
    )
    if delivered_ago is not None:
        stamp = Timestamp()
        stamp.FromDatetime(datetime.now(UTC) - timedelta(seconds=delivered_ago))
        promise.last_delivered_at.CopyFrom(stamp)
    client = delivery_pb2.Client(code="ndtv", name="NDTV", enabled=True, promise=promise)
    return _present.delivery_client(client, TOKYO, 0.95)


def test_a_client_with_nothing_to_measure_is_not_green() -> None:
    quiet = _client(0, 0, True, delivered_ago=37)
    assert quiet["colour"] == "quiet"
    assert quiet["verdict"] == (
        "Nothing to measure: no change was sent to this client in the last 5 min."
    )
    # The delivery 37 s ago was one the promise does not count: said so beside it.
    assert quiet["last_outside"] is True


def test_each_delivery_figure_says_what_it_means() -> None:
    broken = _client(10, 8, False, delivered_ago=3)
    assert broken["colour"] == "bad"
    assert broken["verdict"] == (
        "Promise broken: only 80% of 10 changes arrived within 2.0 s of being saved; "
        "at least 95% must."
    )
    assert broken["misses_words"] == "2 of 10 changes arrived later than 2.0 s, or not at all"
    assert broken["in_time"] == "8 of 10 changes within 2.0 s of the save"
    kept = _client(4, 4, True, delivered_ago=3)
    assert (kept["colour"], kept["last_outside"]) == ("green", False)


def test_a_utc_time_a_service_wrote_in_a_sentence_is_read_in_the_event_s_zone() -> None:
    said = "It resumes by itself at 12:32:04 UTC (resume 1 of 6)."
    assert _times.in_zone_words(said, TOKYO, today=NOON_UTC) == (
        "It resumes by itself at 21:32:04 JST (12:32:04 UTC) (resume 1 of 6)."
    )
    assert _times.in_zone_words(said, UTC) == said
    reason = _present.run(imports_pb2.Run(id="r", status="partly_done", reason=said), TOKYO)
    assert "JST (12:32:04 UTC)" in reason["reason"]
