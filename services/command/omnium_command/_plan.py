"""From locked records and their current values to the writes and the answer: pure code."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from omnium.command.v1 import command_pb2
from omnium_command._intent import Intent, Request
from omnium_command._parse import Refusal
from omnium_command._records import FieldDiff, as_json, diff
from omnium_command._rows import (
    Change,
    CompetitorRead,
    MatchAction,
    OutboxRow,
    ReadState,
    RecordUpdate,
    RowLogEntry,
    SideRead,
    Unit,
    UnitRead,
)

Row = command_pb2.RowOutcome


class Stale(Exception):
    """A scoring action was checked against an older match state; nothing was written."""


@dataclass(slots=True)
class Writes:
    """The parameters of the one write statement."""

    unit_updates: list[RecordUpdate] = field(default_factory=list)
    # Inserts carry the record's columns, whichever fields the command gives.
    unit_inserts: list[dict[str, object]] = field(default_factory=list)
    side_updates: list[RecordUpdate] = field(default_factory=list)
    side_inserts: list[dict[str, object]] = field(default_factory=list)
    medal_updates: list[RecordUpdate] = field(default_factory=list)
    medal_inserts: list[dict[str, object]] = field(default_factory=list)
    competitor_updates: list[RecordUpdate] = field(default_factory=list)
    outbox: list[OutboxRow] = field(default_factory=list)
    # Per import row: (key, kind, subject id, hash, applied_seq).
    key_states: list[tuple[str, str, str | None, bytes | None, int | None]] = field(
        default_factory=list
    )
    row_log: list[RowLogEntry] = field(default_factory=list)
    diff: list[Change] = field(default_factory=list)
    unit_ids: list[str] = field(default_factory=list)
    match_actions: list[MatchAction] = field(default_factory=list)


@dataclass(slots=True)
class Outcome:
    """What the road did for one intent."""

    subject_id: str | None
    changes: list[Change]
    kept: list[Change]
    applied_seq: int | None
    row_outcome: command_pb2.RowOutcome.ValueType = command_pb2.ROW_OUTCOME_UNCHANGED
    reason: str = ""


@dataclass(slots=True)
class Plan:
    writes: Writes
    outcomes: list[tuple[Intent, Outcome]]
    event_id: str | None
    subject_id: str | None

    @property
    def changed(self) -> bool:
        return bool(self.writes.diff and any(not d.get("kept_by_hand") for d in self.writes.diff))


def _entry(kind: str, subject_id: str, code: str, name: str, old: object, new: object) -> Change:
    return {
        "kind": kind,
        "id": subject_id,
        "code": code,
        "field": name,
        "old": as_json(old),
        "new": as_json(new),
    }


def _pins(
    current: list[str], fields: Mapping[str, object], unpin: set[str], pins: bool
) -> list[str] | None:
    """The record's pin list after this command, or None when it stays as it is."""
    if not (pins and fields) and not unpin:
        return None
    added = set(fields).difference(current) if pins else set()
    removed = unpin.intersection(current)
    if not added and not removed:
        return None
    return sorted(set(current).union(added).difference(removed))


_UNIT_CODE = re.compile(r"^[A-Z0-9-]{34}$")


def _units(units: Iterable[UnitRead], sides: Iterable[SideRead]) -> dict[str, Unit]:
    """The read's units by id, each with its sides."""
    by_id: dict[str, Unit] = {u["id"]: {**u, "sides": []} for u in units}
    for side in sides:
        by_id[side["unit_id"]]["sides"].append(side)
    return by_id


class Planner:
    """Builds one command's plan. `state` is the read_state row; `locked` maps refs to ids."""

    def __init__(
        self, request: Request, locked: Mapping[str, Mapping[str, str]], state: ReadState
    ) -> None:
        self.request = request
        self.locked = locked
        self.seq: int = state["seq"]
        self.units = _units(state["units"] or (), state["sides"] or ())
        self.competitors = {c["id"]: c for c in state["competitors"] or ()}
        self.medal_rows = {m["id"]: m for m in state["medal_rows"] or ()}
        self.known_competitors = set(state["known_competitors"] or ())
        self.known_nocs = set(state["known_nocs"] or ())
        self.event_id: str | None = state["event_id"]
        self.disciplines: dict[str, str] = dict(state["disciplines"] or ())
        self.writes = Writes()

    def plan(self) -> Plan:
        outcomes: list[tuple[Intent, Outcome]] = []
        named: dict[tuple[str, str], int] = {}
        for intent in self.request.intents:
            locked = self.locked.get(intent.kind, {})
            subject = locked.get(intent.ref_id or "") or locked.get(intent.ref_code or "")
            if subject is not None and intent.row is not None:
                # One row by id and another by code can still name the same record.
                earlier = named.setdefault((intent.kind, subject), intent.row.position)
                if earlier != intent.row.position:
                    reason = f"it names the same {intent.kind} as row {earlier} of this batch"
                    refused = Outcome(
                        subject, [], [], None, command_pb2.ROW_OUTCOME_REFUSED, reason
                    )
                    outcomes.append((intent, refused))
                    continue
            outcomes.append((intent, self._one(intent)))
        subject_id = next((o.subject_id for _, o in outcomes if o.subject_id), None)
        return Plan(self.writes, outcomes, self.event_id, subject_id)

    def _missing(self, intent: Intent, what: str) -> Outcome:
        ref = intent.ref_id or intent.ref_code
        where = f" in {self.request.event_code}" if intent.ref_code else ""
        reason = f"there is no {what} {ref}{where}"
        if intent.row is None:
            raise Refusal(reason + ": check the id or code")
        return Outcome(None, [], [], None, command_pb2.ROW_OUTCOME_NOT_PLACED, reason)

    def _one(self, intent: Intent) -> Outcome:
        locked = self.locked.get(intent.kind, {})
        subject_id = locked.get(intent.ref_id or "") or locked.get(intent.ref_code or "")
        if intent.kind == "unit":
            return self._one_unit(intent, subject_id)
        if intent.kind == "competitor":
            if subject_id is None:
                return self._missing(intent, "competitor")
            return self._competitor(intent, self.competitors[subject_id])
        return self._medal_row(intent, subject_id)

    def _one_unit(self, intent: Intent, subject_id: str | None) -> Outcome:
        if subject_id is None:
            batch = self.request.batch
            if batch is not None and batch.create_units and intent.ref_code:
                return self._new_unit(intent)
            return self._missing(intent, "unit")
        if intent.approve:
            return self._approve(self.units[subject_id])
        return self._unit(intent, self.units[subject_id])

    def _finish(self, outcome: Outcome) -> Outcome:
        if outcome.changes:
            outcome.row_outcome = command_pb2.ROW_OUTCOME_ACCEPTED
        elif outcome.kept:
            outcome.row_outcome = command_pb2.ROW_OUTCOME_KEPT_BY_HAND
        self.writes.diff.extend(outcome.changes)
        if outcome.kept:
            self.writes.diff.extend({**k, "kept_by_hand": True} for k in outcome.kept)
        return outcome

    def _unit(self, intent: Intent, unit: Unit) -> Outcome:
        request = self.request
        unit_id, code = unit["id"], unit["code"]
        self.event_id = self.event_id or unit["event_id"]
        held = self._unknown_competitor(intent, unit_id, code)
        if held is not None:
            return held
        pins = request.pins
        respect = not pins
        unit_diff = diff(unit, intent.fields, unit["pinned"], respect_pins=respect)
        # Most rows of an import change nothing: the comprehensions below stay empty for them.
        changes = [
            _entry("unit", unit_id, code, f, o, n) for f, (o, n) in unit_diff.changes.items()
        ]
        kept = [
            _entry("unit", unit_id, code, f, o, n) for f, (o, n) in unit_diff.kept_by_hand.items()
        ]
        unpin_all = intent.unpin
        unpin_unit = (
            {name for name in unpin_all if not name.startswith("sides[")} if unpin_all else set()
        )
        pinned = _pins(unit["pinned"], intent.fields, unpin_unit, pins)
        touched = pinned is not None

        sides = {side["order"]: side for side in unit["sides"]}
        orders: Iterable[int] = intent.sides
        if unpin_all:
            orders = set(orders) | {
                int(name[6 : name.index("]")]) for name in unpin_all if name.startswith("sides[")
            }
        for order in sorted(orders):
            fields = intent.sides.get(order, {})
            label = f"sides[{order}]."
            unpin = (
                {name[len(label) :] for name in unpin_all if name.startswith(label)}
                if unpin_all
                else set()
            )
            side = sides.get(order)
            if side is None:
                if not fields:
                    continue
                self.writes.side_inserts.append(
                    {
                        "unit_id": unit_id,
                        "sort_order": order,
                        **{f: as_json(v) for f, v in fields.items()},
                        "pinned": sorted(fields) if pins else [],
                    }
                )
                changes.extend(
                    _entry("unit", unit_id, code, label + f, None, v) for f, v in fields.items()
                )
                touched = True
                continue
            side_diff: FieldDiff = diff(side, fields, side["pinned"], respect_pins=respect)
            side_pinned = _pins(side["pinned"], fields, unpin, pins)
            side_pins_changed = side_pinned is not None
            if side_diff.changes:
                changes.extend(
                    _entry("unit", unit_id, code, label + f, o, n)
                    for f, (o, n) in side_diff.changes.items()
                )
            if side_diff.kept_by_hand:
                kept.extend(
                    _entry("unit", unit_id, code, label + f, o, n)
                    for f, (o, n) in side_diff.kept_by_hand.items()
                )
            if side_diff.changes or side_pins_changed:
                self.writes.side_updates.append(
                    {
                        "id": side["id"],
                        "set": {f: as_json(n) for f, (_, n) in side_diff.changes.items()},
                        "pinned": side_pinned,
                    }
                )
                touched = True
        if unit_diff.changes:
            touched = True
        match_set = self._match_action(intent, unit, changes) if intent.match else {}
        touched = touched or bool(match_set)
        applied_seq: int = unit["changed_seq"]
        if touched:
            self.writes.unit_updates.append(
                {
                    "id": unit_id,
                    "set": {f: as_json(n) for f, (_, n) in unit_diff.changes.items()} | match_set,
                    "pinned": pinned,
                }
            )
            applied_seq = self.seq
        if changes:
            self._unit_changed(unit, changes)
        return self._finish(Outcome(unit_id, changes, kept, applied_seq))

    def _unknown_competitor(self, intent: Intent, unit_id: str, code: str) -> Outcome | None:
        """Held (or refused, for a person) when the intent names a competitor we do not have."""
        unknown = (
            intent.referenced_competitors() - self.known_competitors
            if any("competitor_id" in side for side in intent.sides.values())
            else None
        )
        if not unknown:
            return None
        reason = f"unit {code} names competitor {sorted(unknown)[0]}; we have no such competitor"
        if intent.row is None:
            raise Refusal(reason)
        return Outcome(unit_id, [], [], None, command_pb2.ROW_OUTCOME_HELD, reason)

    def _unit_changed(self, unit: Unit, changes: list[Change]) -> None:
        """The unit named on the timeline item, and its "unit.changed" outbox row."""
        unit_id = unit["id"]
        self.writes.unit_ids.append(unit_id)
        self.writes.outbox.append(
            {
                "event_id": unit["event_id"],
                "kind": "unit.changed",
                "subject_kind": "unit",
                "subject_id": unit_id,
                "unit_id": unit_id,
                "payload": {
                    "code": unit["code"],
                    "changes": [
                        {"field": c["field"], "old": c["old"], "new": c["new"]} for c in changes
                    ],
                },
            }
        )

    def _approve(self, unit: Unit) -> Outcome:
        """The checker step: the outbox row carries the results as approved, so delivery sends
        exactly what the person saw, however the unit changes afterwards."""
        self.event_id = self.event_id or unit["event_id"]
        sides = [
            {
                "order": side["order"],
                **{
                    f: as_json(side[f])
                    for f in ("competitor_id", "score", "result", "rank", "medal")
                },
            }
            for side in sorted(unit["sides"], key=lambda s: s["order"])
        ]
        self.writes.unit_ids.append(unit["id"])
        self.writes.outbox.append(
            {
                "event_id": unit["event_id"],
                "kind": "results.approved",
                "subject_kind": "unit",
                "subject_id": unit["id"],
                "unit_id": unit["id"],
                "payload": {
                    "code": unit["code"],
                    "approved_seq": unit["changed_seq"],
                    "unit": {
                        **{f: as_json(unit[f]) for f in ("name", "phase", "start_at", "venue")},
                        "status": unit["status"],
                        "sides": sides,
                    },
                },
            }
        )
        return Outcome(unit["id"], [], [], unit["changed_seq"], command_pb2.ROW_OUTCOME_ACCEPTED)

    def _match_action(self, intent: Intent, unit: Unit, changes: list[Change]) -> dict[str, object]:
        """Record a scoring action, if the match is still where the scorer's check saw it."""
        match = intent.match
        assert match is not None
        expected, current = match["expected_seq"], unit["match_seq"]
        if expected != current:
            raise Stale(f"unit {unit['code']} is at action {current}, not {expected}")
        seq = current + 1
        self.writes.match_actions.append(
            {
                "unit_id": unit["id"],
                "seq": seq,
                "kind": match["kind"],
                "side": match.get("side"),
                "fields": match.get("fields") or {},
                "undoes": match.get("undoes"),
                "client_at": match.get("client_at"),
            }
        )
        changes.append(_entry("unit", unit["id"], unit["code"], "match_seq", current, seq))
        return {"match_state": match["state"], "match_seq": seq}

    def _new_unit(self, intent: Intent) -> Outcome:
        """A schedule row naming a unit we do not have yet: create it, with its sides."""
        code = intent.ref_code or ""
        event = self.request.event_code
        problem = None
        if not _UNIT_CODE.match(code):
            problem = f"cannot create unit {code!r}: a unit code is 34 characters of A-Z, 0-9, -"
        elif self.event_id is None:
            problem = f"cannot create unit {code}: there is no event {event}"
        elif not intent.fields.get("name"):
            problem = f"cannot create unit {code}: the row has no name"
        elif intent.discipline_code not in self.disciplines:
            problem = (
                f"cannot create unit {code}: there is no discipline "
                f"{intent.discipline_code!r} in {event}"
            )
        if problem is not None:
            return Outcome(None, [], [], None, command_pb2.ROW_OUTCOME_NOT_PLACED, problem)
        unit_id = str(uuid.uuid4())
        # A field cleared on a unit we do not have yet is nothing to write or tell anyone.
        fields = {f: v for f, v in intent.fields.items() if v is not None}
        self.writes.unit_inserts.append(
            {
                "id": unit_id,
                "event_id": self.event_id,
                "discipline_id": self.disciplines[intent.discipline_code or ""],
                "code": code,
                **{f: as_json(v) for f, v in fields.items()},
            }
        )
        changes = [_entry("unit", unit_id, code, f, None, v) for f, v in fields.items()]
        for order, given in sorted(intent.sides.items()):
            side = {f: v for f, v in given.items() if v is not None}
            self.writes.side_inserts.append(
                {
                    "unit_id": unit_id,
                    "sort_order": order,
                    **{f: as_json(v) for f, v in side.items()},
                    "pinned": [],
                }
            )
            changes.extend(
                _entry("unit", unit_id, code, f"sides[{order}].{f}", None, v)
                for f, v in side.items()
            )
        self.writes.unit_ids.append(unit_id)
        self.writes.outbox.append(
            {
                "event_id": self.event_id,
                "kind": "unit.created",
                "subject_kind": "unit",
                "subject_id": unit_id,
                "unit_id": unit_id,
                "payload": {
                    "code": code,
                    "changes": [
                        {"field": c["field"], "old": None, "new": c["new"]} for c in changes
                    ],
                },
            }
        )
        return self._finish(Outcome(unit_id, changes, [], self.seq))

    def _competitor(self, intent: Intent, competitor: CompetitorRead) -> Outcome:
        request = self.request
        cid, code = competitor["id"], competitor["code"]
        self.event_id = self.event_id or competitor["event_id"]
        d = diff(competitor, intent.fields, competitor["pinned"], respect_pins=not request.pins)
        changes = [_entry("competitor", cid, code, f, o, n) for f, (o, n) in d.changes.items()]
        kept = [_entry("competitor", cid, code, f, o, n) for f, (o, n) in d.kept_by_hand.items()]
        pinned = _pins(competitor["pinned"], intent.fields, set(intent.unpin), request.pins)
        pins_changed = pinned is not None
        applied_seq: int = competitor["changed_seq"]
        if d.changes or pins_changed:
            self.writes.competitor_updates.append(
                {
                    "id": cid,
                    "set": {f: as_json(n) for f, (_, n) in d.changes.items()},
                    "pinned": pinned,
                }
            )
            applied_seq = self.seq
        if changes:
            self.writes.outbox.append(
                {
                    "event_id": competitor["event_id"],
                    "kind": "competitor.changed",
                    "subject_kind": "competitor",
                    "subject_id": cid,
                    "unit_id": None,
                    "payload": {
                        "code": code,
                        "changes": [
                            {"field": c["field"], "old": c["old"], "new": c["new"]} for c in changes
                        ],
                    },
                }
            )
        return self._finish(Outcome(cid, changes, kept, applied_seq))

    def _medal_row(self, intent: Intent, medal_id: str | None) -> Outcome:
        request = self.request
        scope, _, noc = (intent.ref_code or "").rpartition(":")
        code = intent.ref_code or ""
        if self.event_id is None:
            raise Refusal(f"there is no event {request.event_code}")
        if intent.row is not None and noc not in self.known_nocs:
            # As an unknown team is: held with a question, never written and served.
            reason = (
                f"the medal table names NOC {noc}, and no competitor of {request.event_code} is "
                f"from {noc}. If {noc} takes part, add its competitors; if the code is wrong, "
                "ask the source to correct it. Once it is right, the row goes through on the "
                "next run."
            )
            return Outcome(medal_id, [], [], None, command_pb2.ROW_OUTCOME_HELD, reason)
        if medal_id is None and intent.withdraw:
            raise Refusal(
                f"there is no medal row {code} in {request.event_code}, so there is nothing to "
                "withdraw: check the discipline code and NOC"
            )
        if medal_id is None:
            discipline_id = self.disciplines.get(scope) if scope else None
            if scope and discipline_id is None:
                reason = f"there is no discipline {scope} in {request.event_code}"
                if intent.row is None:
                    raise Refusal(reason)
                return Outcome(None, [], [], None, command_pb2.ROW_OUTCOME_NOT_PLACED, reason)
            new_id = str(uuid.uuid4())
            self.writes.medal_inserts.append(
                {
                    "id": new_id,
                    "event_id": self.event_id,
                    "discipline_id": discipline_id,
                    "noc": noc,
                    **intent.fields,
                }
            )
            changes = [
                _entry("medal_row", new_id, code, f, None, v) for f, v in intent.fields.items()
            ]
            self._medal_event(new_id, code, changes)
            return self._finish(Outcome(new_id, changes, [], self.seq))
        row = self.medal_rows[medal_id]
        d = diff(row, intent.fields, row["pinned"], respect_pins=not request.pins)
        changes = [_entry("medal_row", medal_id, code, f, o, n) for f, (o, n) in d.changes.items()]
        kept = [
            _entry("medal_row", medal_id, code, f, o, n) for f, (o, n) in d.kept_by_hand.items()
        ]
        pinned = _pins(row["pinned"], intent.fields, set(), request.pins)
        pins_changed = pinned is not None
        applied_seq: int = row["changed_seq"]
        if d.changes or pins_changed:
            self.writes.medal_updates.append(
                {
                    "id": medal_id,
                    "set": {f: n for f, (_, n) in d.changes.items()},
                    "pinned": pinned,
                }
            )
            applied_seq = self.seq
        self._medal_event(medal_id, code, changes)
        return self._finish(Outcome(medal_id, changes, kept, applied_seq))

    def _medal_event(self, medal_id: str, code: str, changes: list[Change]) -> None:
        if changes:
            self.writes.outbox.append(
                {
                    "event_id": self.event_id,
                    "kind": "medal_row.changed",
                    "subject_kind": "medal_row",
                    "subject_id": medal_id,
                    "unit_id": None,
                    "payload": {
                        "code": code,
                        "changes": [
                            {"field": c["field"], "old": c["old"], "new": c["new"]} for c in changes
                        ],
                    },
                }
            )
