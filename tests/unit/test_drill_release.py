"""The release drill's own logic: which figures miss their target, and how a copy is set to
start from one version or the other."""

from __future__ import annotations

from pathlib import Path

from bench.drill_copies import Copy
from bench.drill_release import TARGETS, Version, launch, misses


def _clean() -> dict[str, float | str]:
    return dict.fromkeys(TARGETS, 0) | {"release_seconds": 120.0}


def test_a_run_with_every_target_met_misses_nothing() -> None:
    assert misses([_clean(), _clean()]) == []


def test_a_lost_tap_an_error_a_failed_copy_or_no_figure_at_all_is_a_miss() -> None:
    second = _clean() | {"rollback_copies_failed": 1, "release_scorer_errors": float("nan")}
    second.pop("rollback_acked_lost")
    assert misses([_clean(), second]) == [
        "run 2: rollback_acked_lost = None (target 0)",
        "run 2: release_scorer_errors = nan (target 0)",
        "run 2: rollback_copies_failed = 1 (target 0)",
    ]


def test_a_copy_of_the_previous_version_gets_its_code_and_only_the_settings_it_has() -> None:
    copy = Copy("gateway-1", "gateway", ["python", "-m", "omnium_gateway"], {}, [8180], [])
    base = {
        "PATH": "/usr/bin",
        "PYTHONPATH": "/somewhere/else",
        "OMNIUM_DATABASE_URL": "postgresql://gateway@127.0.0.1:5432/omnium",
        "OMNIUM_NEW_SETTING": "1",
    }
    previous = Version(
        "previous",
        "abc",
        Path("/releases/abc"),
        {"PYTHONPATH": "/releases/abc/libs", "OMNIUM_SCHEMA_AHEAD_ALLOWED": "0"},
        frozenset({"OMNIUM_DATABASE_URL", "OMNIUM_SCHEMA_AHEAD_ALLOWED"}),
    )
    launch(copy, base, previous)
    assert copy.cwd == Path("/releases/abc")
    assert copy.env == {
        "PATH": "/usr/bin",
        "PYTHONPATH": "/releases/abc/libs",
        "OMNIUM_DATABASE_URL": "postgresql://gateway@127.0.0.1:5432/omnium",
        "OMNIUM_SCHEMA_AHEAD_ALLOWED": "0",
    }
    this = Version("this", "def", Path("/repo"), {}, None)
    launch(copy, base, this)
    assert copy.cwd == Path("/repo")
    assert copy.env == {k: v for k, v in base.items() if k != "PYTHONPATH"}
