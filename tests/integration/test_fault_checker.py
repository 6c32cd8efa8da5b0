"""The fault drills' checker, run as a person runs it: a process, its printed figures and its
exit status, over made-up histories and real rows (a file, or plain SQL on a real server)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from bench.faults.checker import _replayed

REPO = Path(__file__).resolve().parents[2]

# pg1 leads until its leader key expires at 20 s; nobody leads until pg2 takes it at 25 s.
LEADERS = [
    {"kind": "leader", "node": "pg1", "since": 0.0},
    {"kind": "leader", "node": None, "since": 20.0},
    {"kind": "leader", "node": "pg2", "since": 25.0},
]


def _tap(tap_id: str, sent: float, answered: float, outcome: str, node: str) -> dict[str, Any]:
    return {
        "kind": "tap",
        "id": tap_id,
        "client": tap_id.split(":", maxsplit=1)[0],
        "sent": sent,
        "answered": answered,
        "outcome": outcome,
        "node": node,
    }


def _clean_day() -> list[dict[str, Any]]:
    return [
        *LEADERS,
        {"kind": "sink", "client": "sse1"},
        _tap("dev1:1", 1.0, 1.1, "saved", "pg1"),
        # Sent in the gap: kept on the device, sent again, saved by the new leader.
        _tap("dev1:2", 21.0, 21.5, "try_again", "pg1"),
        _tap("dev1:2", 26.0, 26.2, "duplicate", "pg2"),
        _tap("dev1:3", 27.0, 27.1, "saved", "pg2"),
        {"kind": "read", "client": "fan1", "path": "/v1/events", "sent": 22.0, "status": 200},
        {"kind": "read", "client": "fan1", "path": "/v1/units/X", "sent": 23.0, "status": 304},
        *({"kind": "delivered", "client": "sse1", "id": i} for i in ("dev1:1", "dev1:2", "dev1:3")),
    ]


ROWS = {
    "pg2": {"role": "primary", "taps": ["dev1:1", "dev1:2", "dev1:3"]},
    "pg1": {"role": "standby", "taps": ["dev1:1", "dev1:2", "dev1:3"]},
}


def _write(tmp_path: Path, history: list[dict[str, Any]], rows: Any) -> tuple[Path, Path]:
    history_file = tmp_path / "scorers.jsonl"
    history_file.write_text("".join(json.dumps(r) + "\n" for r in history))
    rows_file = tmp_path / "nodes.json"
    rows_file.write_text(json.dumps(rows))
    return history_file, rows_file


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.faults.checker", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _figures(stdout: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stdout.splitlines())


def test_a_clean_history_reports_nothing_and_exits_0(tmp_path: Path) -> None:
    history, rows = _write(tmp_path, _clean_day(), ROWS)
    done = _check("--fault", "leader_killed", str(history), "--rows", str(rows))
    assert done.returncode == 0, done.stderr
    figures = _figures(done.stdout)
    assert figures["leader_killed_taps_acked"] == "3"
    assert figures["leader_killed_acked_lost"] == "0"
    assert figures["leader_killed_split_writes"] == "0"
    assert figures["leader_killed_duplicates"] == "0"
    assert figures["leader_killed_api_errors"] == "0"
    assert figures["leader_killed_delivery_missed"] == "0"
    assert figures["leader_killed_tap_max_wait_s"] == "5.2"  # dev1:2, from 21.0 to 26.2
    assert figures["leader_killed_violations"] == "0"
    assert done.stderr == ""


def test_a_lost_acked_tap_and_a_write_on_a_stale_primary_are_both_reported(
    tmp_path: Path,
) -> None:
    history = [
        *_clean_day(),
        # Answered saved by pg1, and then nowhere: lost.
        _tap("dev2:1", 5.0, 5.1, "saved", "pg1"),
        # Answered saved by pg1 after its leader key expired: a split write (it survived).
        _tap("dev2:2", 22.0, 22.4, "saved", "pg1"),
        {"kind": "delivered", "client": "sse1", "id": "dev2:1"},
        {"kind": "delivered", "client": "sse1", "id": "dev2:2"},
    ]
    rows = {name: {**node, "taps": [*node["taps"], "dev2:2"]} for name, node in ROWS.items()}
    history_file, rows_file = _write(tmp_path, history, rows)
    done = _check(str(history_file), "--rows", str(rows_file))
    assert done.returncode == 1, done.stdout
    figures = _figures(done.stdout)
    assert figures["acked_lost"] == "1"
    assert figures["acked_lost_on_standby"] == "1"  # the same tap, missing there too
    assert figures["split_writes"] == "1"
    assert figures["violations"] == "3"
    assert "tap dev2:1 was answered saved and is not on the primary" in done.stderr
    assert "tap dev2:2 was answered saved by pg1, which did not hold the leader key" in done.stderr


def test_reads_that_failed_and_changes_never_delivered_are_reported(tmp_path: Path) -> None:
    history = [
        r for r in _clean_day() if not (r["kind"] == "delivered" and r["id"] == "dev1:3")
    ] + [{"kind": "read", "client": "fan2", "path": "/v1/medals", "sent": 24.0, "status": 0}]
    history_file, rows_file = _write(tmp_path, history, ROWS)
    done = _check(str(history_file), "--rows", str(rows_file))
    assert done.returncode == 1
    figures = _figures(done.stdout)
    assert figures["api_errors"] == "1"
    assert figures["api_errors_uncached"] == "1"
    assert figures["delivery_missed"] == "1"
    assert "tap dev1:3 was saved and never reached sse1" in done.stderr


def test_the_nodes_are_read_with_plain_sql(tmp_path: Path, database_url: str) -> None:
    """One real server, the primary: a tap it holds counts, one it lacks is lost."""
    history = [_tap("dev1:1", 1.0, 1.1, "saved", "pg1"), _tap("dev1:2", 2.0, 2.1, "saved", "pg1")]
    history_file, _ = _write(tmp_path, history, {})
    held = "SELECT * FROM (VALUES ('dev1:1')) AS t(command_id)"
    done = _check(str(history_file), "--node", f"pg1={database_url}", "--taps-sql", held)
    assert done.returncode == 1
    assert _figures(done.stdout)["acked_lost"] == "1"
    assert "tap dev1:2 was answered saved and is not on the primary" in done.stderr


def test_a_history_it_cannot_read_is_named_with_its_line(tmp_path: Path) -> None:
    history_file, rows_file = _write(tmp_path, [], ROWS)
    history_file.write_text('{"kind": "tap", "id": "dev1:1"}\n')
    done = _check(str(history_file), "--rows", str(rows_file))
    assert done.returncode == 2
    assert f"{history_file}:1: a 'tap' record needs sent, outcome" in done.stderr


def test_a_standby_is_waited_for_up_to_the_primary_lsn(database_url: str) -> None:
    """The primary's position, read as PostgreSQL gives it, is compared on a standby without a
    type error (a primary has replayed nothing: the wait runs out and returns)."""

    async def wait() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            lsn = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
            await _replayed(conn, lsn, 0.3)
        finally:
            await conn.close()

    asyncio.run(wait())
