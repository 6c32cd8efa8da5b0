"""protos/ break no caller of the last release (Buf's FILE rules against the committed
baseline), and a change that would break one is caught, named, and fails this test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dev.protos import BASELINE, PROTOS, breaking

DELIVERY = Path("omnium/delivery/v1/delivery.proto")
COMMAND = Path("omnium/command/v1/command.proto")


def test_the_protos_break_no_caller_of_the_baseline() -> None:
    done = breaking()
    assert done.returncode == 0, (
        "a change to protos/ would break a caller built against the last release:\n"
        f"{done.stdout}{done.stderr}\nKeep the old field, method or message (add new ones "
        "beside it), or, for a new major version, a new package (omnium.<service>.v2)."
    )


@pytest.mark.parametrize(
    ("file", "before", "after", "rule"),
    [
        (DELIVERY, "  int32 feeds = 1;", "  int64 feeds = 1;", "FIELD_SAME_TYPE"),
        (DELIVERY, "  int32 feeds = 1;", "  int32 feed_count = 1;", "FIELD_SAME_NAME"),
        (DELIVERY, "  int32 feeds = 1;", "  int32 feeds = 2;", "FIELD_NO_DELETE"),
        (
            DELIVERY,
            "  rpc Resend(ResendRequest) returns (ResendResponse);",
            "",
            "RPC_NO_DELETE",
        ),
        (
            COMMAND,
            "message GetTimelineRequest {",
            "// Only the comments changed.\nmessage GetTimelineRequest {",
            None,
        ),
        (DELIVERY, "  int32 feeds = 1;", "  int32 feeds = 1;\n  string note = 2;", None),
    ],
    ids=["retyped", "renamed", "renumbered", "rpc-removed", "commented", "field-added"],
)
def test_a_change_that_breaks_a_caller_is_caught(
    tmp_path: Path, file: Path, before: str, after: str, rule: str | None
) -> None:
    changed = tmp_path / "protos"
    shutil.copytree(PROTOS, changed)
    text = (changed / file).read_text()
    assert before in text, f"{before!r} is no longer in {file}"
    (changed / file).write_text(text.replace(before, after, 1))
    done = breaking(changed, BASELINE)
    found = {json.loads(line)["type"] for line in done.stdout.splitlines() if line.strip()}
    if rule is None:
        assert done.returncode == 0 and not found, done.stdout + done.stderr
    else:
        assert done.returncode != 0 and rule in found, done.stdout + done.stderr
