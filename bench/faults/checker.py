"""A checker of a fault's outcome, from the clients' histories and each node's tables alone.

It imports nothing of omnium: it reads plain JSON lines files and plain SQL, so a bug in the
services cannot hide itself from it. After a fault, the drill (or a person) runs

    python -m bench.faults.checker --fault leader_killed history/*.jsonl \\
        --node pg1=postgresql://postgres@127.0.0.1:5433/omnium \\
        --node pg2=postgresql://postgres@127.0.0.1:5434/omnium

or, with each node's rows already read, `--rows nodes.json`. It prints `name: value` lines,
each violation on stderr, and exits 1 when any promise was broken (2 on input it cannot read).

A history is JSON lines, one object each, `kind` first; times are seconds (any one clock):

    {"kind": "tap", "id": "dev3:17", "client": "dev3", "sent": 12.0, "answered": 12.1,
     "outcome": "saved", "node": "pg1"}       one try; outcome saved, duplicate (counts as
                                              saved), try_again, refused or error; node: the
                                              database node that answered it (when known)
    {"kind": "read", "client": "fan1", "path": "/v1/events", "sent": 12.0, "status": 200,
     "cached": true}                         a public read; status 0: no answer at all
    {"kind": "leader", "node": "pg2", "since": 31.5}   who holds Patroni's leader key from then
                                              (its history or the drill's observations; a
                                              node of "" or null: nobody)
    {"kind": "sink", "client": "sse1"}         a client that must get every saved tap
    {"kind": "delivered", "client": "sse1", "id": "dev3:17"}   a tap a sink got

`--rows` is {"pg1": {"role": "primary", "taps": ["dev3:17", ...]}, "pg2": {"role":
"standby", "taps": [...]}}, each id once per row holding it.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

SAVED = frozenset({"saved", "duplicate"})
FINAL = SAVED | {"refused"}
GOOD_READS = frozenset({200, 304})
# One row per tap saved: the device's client id is the action's command id.
TAPS_SQL = "SELECT command_id FROM match_action"
ROLE_SQL = "SELECT pg_is_in_recovery()"


class BadInput(Exception):
    """The checker's input cannot be read; the message says which line and why."""


@dataclass(slots=True)
class Node:
    name: str
    role: str  # primary or standby
    taps: Counter[str]


@dataclass(slots=True)
class History:
    taps: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)
    leaders: list[tuple[float, str]] = field(default_factory=list)
    sinks: set[str] = field(default_factory=set)
    delivered: set[tuple[str, str]] = field(default_factory=set)


def _need(record: dict[str, Any], where: str, *names: str) -> None:
    missing = [n for n in names if n not in record]
    if missing:
        raise BadInput(f"{where}: a {record.get('kind')!r} record needs {', '.join(missing)}")


def read_history(paths: Iterable[Path]) -> History:
    history = History()
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BadInput(f"{path}: cannot read it ({exc.strerror})") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInput(f"{where}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise BadInput(f"{where}: each line must be one JSON object")
            kind = record.get("kind")
            if kind == "tap":
                _need(record, where, "id", "sent", "outcome")
                history.taps.append(record)
            elif kind == "read":
                _need(record, where, "sent", "status")
                history.reads.append(record)
            elif kind == "leader":
                _need(record, where, "since")
                history.leaders.append((float(record["since"]), record.get("node") or ""))
            elif kind == "sink":
                _need(record, where, "client")
                history.sinks.add(str(record["client"]))
            elif kind == "delivered":
                _need(record, where, "client", "id")
                history.delivered.add((str(record["client"]), str(record["id"])))
            else:
                raise BadInput(
                    f"{where}: kind {kind!r} is not one of tap, read, leader, sink, delivered"
                )
    history.leaders.sort()
    return history


def read_rows(path: Path) -> list[Node]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the nodes' rows ({exc})") from exc
    if not isinstance(found, dict):
        raise BadInput(f'{path}: expected {{"node": {{"role": ..., "taps": [...]}}}}')
    nodes = []
    for name, node in found.items():
        if not isinstance(node, dict) or node.get("role") not in ("primary", "standby"):
            raise BadInput(f"{path}: node {name!r} needs a role, primary or standby")
        nodes.append(Node(name, node["role"], Counter(map(str, node.get("taps", [])))))
    return nodes


async def read_nodes(dsns: dict[str, str], taps_sql: str, catch_up: float) -> list[Node]:
    """Each node's role and taps by plain SQL. The standbys are read once they have replayed
    everything the primary had when it was read (for up to `catch_up` seconds), so a standby
    that is merely behind is not counted as having lost a tap."""
    conns: dict[str, asyncpg.Connection] = {}
    try:
        for name, dsn in dsns.items():
            try:
                conns[name] = await asyncpg.connect(dsn, timeout=10)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                raise BadInput(f"node {name}: cannot connect to {dsn} ({exc})") from exc
        roles = {
            n: "standby" if await c.fetchval(ROLE_SQL) else "primary" for n, c in conns.items()
        }
        nodes: list[Node] = []
        primary_lsn = None
        for name in sorted(conns, key=lambda n: roles[n] != "primary"):
            conn = conns[name]
            if roles[name] == "primary":
                rows = await conn.fetch(taps_sql)
                primary_lsn = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
            else:
                if primary_lsn is not None:
                    await _replayed(conn, primary_lsn, catch_up)
                rows = await conn.fetch(taps_sql)
            nodes.append(Node(name, roles[name], Counter(str(r[0]) for r in rows)))
        return nodes
    finally:
        for conn in conns.values():
            await conn.close()


async def _replayed(conn: asyncpg.Connection, lsn: object, within: float) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        if await conn.fetchval("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", str(lsn)):
            return
        await asyncio.sleep(0.2)


def leader_at(leaders: Sequence[tuple[float, str]], at: float) -> str | None:
    """Who held the leader key at `at` (None: before the first observation)."""
    i = bisect.bisect_right([since for since, _ in leaders], at)
    return leaders[i - 1][1] if i else None


def led_during(leaders: Sequence[tuple[float, str]], node: str, start: float, end: float) -> bool:
    """Whether `node` held the leader key at some moment of [start, end]: the commit is
    somewhere in that window."""
    if leader_at(leaders, start) == node:
        return True
    return any(name == node for since, name in leaders if start < since <= end)


@dataclass(slots=True)
class Report:
    figures: dict[str, float | int | str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def check(history: History, nodes: Sequence[Node], *, max_wait: float | None = None) -> Report:
    """Every promise a fault must keep, over one history and the nodes' rows."""
    report = Report()
    tries: dict[str, list[dict[str, Any]]] = {}
    for tap in history.taps:
        tries.setdefault(str(tap["id"]), []).append(tap)
    acked = {i for i, ts in tries.items() if any(t["outcome"] in SAVED for t in ts)}
    report.figures["taps"] = len(tries)
    report.figures["taps_acked"] = len(acked)
    _saved_taps(report, acked, nodes)
    _split_writes(report, history)
    _waits(report, tries, max_wait)
    _reads(report, history)
    _deliveries(report, history, acked)
    report.figures["violations"] = len(report.violations)
    return report


def _saved_taps(report: Report, acked: set[str], nodes: Sequence[Node]) -> None:
    """Every tap answered saved is on the final primary and on its standby, exactly once."""
    primaries = [n for n in nodes if n.role == "primary"]
    standbys = [n for n in nodes if n.role == "standby"]
    if len(primaries) != 1:
        names = ", ".join(n.name for n in primaries) or "none"
        report.violations.append(f"expected one primary at the end, found {names}")
    lost = sorted({i for i in acked for p in primaries if p.taps[i] == 0})
    report.figures["acked_lost"] = len(lost)
    report.violations += [f"tap {i} was answered saved and is not on the primary" for i in lost]
    off_standby = sorted({i for i in acked for s in standbys if s.taps[i] == 0})
    report.figures["acked_lost_on_standby"] = len(off_standby)
    report.violations += [
        f"tap {i} was answered saved and is not on the standby" for i in off_standby
    ]
    doubled = sorted({i for n in nodes for i, count in n.taps.items() if count > 1})
    report.figures["duplicates"] = len(doubled)
    report.violations += [f"tap {i} is saved more than once" for i in doubled]


def _split_writes(report: Report, history: History) -> None:
    """No tap answered saved by a node that did not hold the leader key while it was sent."""
    split = [
        tap
        for tap in history.taps
        if history.leaders
        and tap["outcome"] in SAVED
        and tap.get("node")
        and not led_during(
            history.leaders,
            str(tap["node"]),
            float(tap["sent"]),
            float(tap.get("answered", tap["sent"])),
        )
    ]
    report.figures["split_writes"] = len(split)
    report.violations += [
        f"tap {tap['id']} was answered {tap['outcome']} by {tap['node']}, which did not hold "
        f"the leader key between {tap['sent']} and {tap.get('answered')}"
        for tap in split
    ]


def _waits(report: Report, tries: dict[str, list[dict[str, Any]]], max_wait: float | None) -> None:
    """From a tap's first send to its first final answer (saved or refused); a tap never
    answered so waited until its last try."""
    waits, unanswered = [], 0
    for ts in tries.values():
        first = min(float(t["sent"]) for t in ts)
        final = [float(t.get("answered", t["sent"])) for t in ts if t["outcome"] in FINAL]
        if not final:
            unanswered += 1
            final = [max(float(t.get("answered", t["sent"])) for t in ts)]
        waits.append(min(final) - first)
    longest = max(waits, default=0.0)
    report.figures["taps_unanswered"] = unanswered
    report.figures["tap_max_wait_s"] = round(longest, 1)
    if max_wait is not None and longest > max_wait:
        report.violations.append(f"a tap waited {longest:.1f} s, longer than {max_wait} s")


def _reads(report: Report, history: History) -> None:
    failed = [r for r in history.reads if int(r["status"]) not in GOOD_READS]
    report.figures["api_reads"] = len(history.reads)
    report.figures["api_errors"] = len(failed)
    report.figures["api_errors_uncached"] = sum(1 for r in failed if not r.get("cached"))
    report.violations += [
        f"{r.get('client')} read {r.get('path')} and got {r['status'] or 'no answer'}"
        for r in failed
    ]


def _deliveries(report: Report, history: History, acked: set[str]) -> None:
    missed = sorted((c, i) for c in history.sinks for i in acked if (c, i) not in history.delivered)
    report.figures["delivery_missed"] = len(missed)
    report.violations += [f"tap {i} was saved and never reached {c}" for c, i in missed]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.faults.checker", description=__doc__.splitlines()[0]
    )
    parser.add_argument("history", nargs="+", type=Path, help="the clients' JSON lines files")
    parser.add_argument("--fault", default="", help="prefix of every figure: <fault>_acked_lost")
    nodes = parser.add_mutually_exclusive_group(required=True)
    nodes.add_argument("--node", action="append", default=[], metavar="NAME=DSN")
    nodes.add_argument("--rows", type=Path, help="each node's role and taps, as JSON")
    parser.add_argument("--taps-sql", default=TAPS_SQL, help="one row per tap saved, its id first")
    parser.add_argument("--catch-up", type=float, default=30.0, help="seconds to wait for standbys")
    parser.add_argument("--max-wait", type=float, help="a tap waiting longer is a violation")
    return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        history = read_history(args.history)
        if args.rows is not None:
            nodes = read_rows(args.rows)
        else:
            dsns = {}
            for item in args.node:
                name, eq, dsn = item.partition("=")
                if not eq or not name or not dsn:
                    raise BadInput(f"--node {item!r}: write it NAME=DSN, e.g. pg1=postgresql://…")
                dsns[name] = dsn
            nodes = asyncio.run(read_nodes(dsns, args.taps_sql, args.catch_up))
    except BadInput as exc:
        print(f"checker: {exc}", file=sys.stderr)
        return 2
    report = check(history, nodes, max_wait=args.max_wait)
    prefix = f"{args.fault}_" if args.fault else ""
    for name, value in report.figures.items():
        print(f"{prefix}{name}: {value}")
    for violation in report.violations:
        print(f"violation: {violation}", file=sys.stderr)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(run())
