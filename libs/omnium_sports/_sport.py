"""A sport and its rules, as _load.py read them from a file: applied to a match's state."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omnium_sports._expr import (
    Condition,
    Effects,
    RuleError,
    Scope,
    Template,
    expr_json,
    statements_json,
    template_json,
)

FIELD_TYPES = ("int", "number", "text", "choice", "bool")
UNDO = "undo"


class SportFileError(ValueError):
    """A sport file cannot be used; the message names the file, the line and the field."""


class ActionRefused(ValueError):
    """An action breaks the sport's rules in the match's current state; says what to do."""


@dataclass(frozen=True, slots=True)
class FieldRule:
    name: str
    type: str
    label: str
    required: bool
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    max_length: int = 80

    def clean(self, value: Any, action: str) -> Any:
        where = f"{action}: {self.label}"
        if value is None or value == "":
            if self.required:
                raise ActionRefused(f"{where} is missing")
            return self.default
        if self.type in ("int", "number"):
            return self._number(value, where)
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            raise ActionRefused(f"{where} must be true or false")
        text = str(value).strip()
        if self.type == "choice":
            if text not in self.choices:
                raise ActionRefused(f"{where} must be one of {', '.join(self.choices)}")
            return text
        if len(text) > self.max_length:
            raise ActionRefused(f"{where} is longer than {self.max_length} characters")
        return text

    def _number(self, value: object, where: str) -> float:
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ActionRefused(f"{where} must be a number, not {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ActionRefused(f"{where} must be a number, not {value!r}")
        if self.type == "int":
            if float(value) != int(value):
                raise ActionRefused(f"{where} must be a whole number, not {value}")
            value = int(value)
        if self.minimum is not None and value < self.minimum:
            raise ActionRefused(f"{where} must be {self.minimum:g} or more, not {value}")
        if self.maximum is not None and value > self.maximum:
            raise ActionRefused(f"{where} must be {self.maximum:g} or less, not {value}")
        return value

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "label": self.label,
            "required": self.required,
        }
        if self.default is not None:
            out["default"] = self.default
        if self.minimum is not None:
            out["min"] = self.minimum
        if self.maximum is not None:
            out["max"] = self.maximum
        if self.choices:
            out["choices"] = list(self.choices)
        return out


@dataclass(frozen=True, slots=True)
class ActionRule:
    name: str
    label: str
    takes_side: bool
    fields: dict[str, FieldRule]
    require: tuple[tuple[Condition, Template], ...]
    effects: Effects
    group: str

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "side": self.takes_side,
            "group": self.group,
            "fields": [f.describe() for f in self.fields.values()],
        }


# The match values a clock reads: whether it runs, when the running period started (device
# seconds), and the playing time of the periods that ended.
CLOCK_VALUES = ("running", "period_started_at", "played_seconds")


@dataclass(frozen=True, slots=True)
class ConsoleView:
    """What the scorer console shows and asks beyond the buttons (the file's [console])."""

    period: Template | None = None  # the period, from the match values ("Period {period}")
    clock: bool = False  # a match clock, from CLOCK_VALUES
    minute: str = ""  # the field the clock fills in when details are asked
    ask: tuple[str, ...] = ()  # actions whose details are asked on the tap
    confirm: tuple[str, ...] = ()  # actions asked about once before they are taken
    numbers: tuple[str, ...] = ()  # text fields typed on a number keyboard (shirt numbers)

    def describe(self) -> dict[str, Any]:
        return {
            "period": template_json(self.period) if self.period else None,
            "clock": self.clock,
            "minute": self.minute,
            "ask": list(self.ask),
            "confirm": list(self.confirm),
            "numbers": list(self.numbers),
        }


@dataclass(frozen=True, slots=True)
class Ranking:
    by: Condition
    descending: bool
    only: Condition | None


@dataclass(frozen=True, slots=True)
class Sport:
    code: str
    name: str
    disciplines: tuple[str, ...]
    sides: int  # 0: as many as the unit has
    rules: Mapping[str, Any]
    match: Mapping[str, Any]
    side: Mapping[str, Any]
    player: Mapping[str, Any]
    actions: dict[str, ActionRule]
    finish_when: Condition
    winner: Condition | None
    score: Template
    result: Template | None
    ranking: Ranking | None
    path: str = ""
    source: str = field(default="", repr=False)
    console: ConsoleView = field(default_factory=ConsoleView)

    # -- the match state ------------------------------------------------------------------

    def new_state(self, sides: int) -> dict[str, Any]:
        count = self.sides or sides
        if count < 1:
            raise ActionRefused(f"{self.name} needs at least one side on the unit")
        return {
            "sport": self.code,
            "match": dict(self.match),
            "sides": [dict(self.side) for _ in range(count)],
            "players": {},
            "ranks": [None] * count,
            "finished": False,
            "winner": None,
        }

    def apply(self, state: Mapping[str, Any], action: Mapping[str, Any]) -> dict[str, Any]:
        """The state after `action`, or ActionRefused saying why it cannot be taken now."""
        kind = action.get("kind")
        rule = self.actions.get(kind) if isinstance(kind, str) else None
        if rule is None:
            known = ", ".join(sorted(self.actions))
            raise ActionRefused(f"{self.name} has no action {kind!r}; it has {known}")
        if state.get("finished"):
            raise ActionRefused(
                f"the match is over ({self.summary(state)}): undo the last action to correct it"
            )
        # A plain JSON document: a JSON round trip copies it several times faster than deepcopy.
        new: dict[str, Any] = json.loads(json.dumps(state))
        # A match begun under an older version of the file lacks the values added since.
        new["match"] = {**self.match, **new["match"]}
        new["sides"] = [{**self.side, **side} for side in new["sides"]]
        sides: list[dict[str, Any]] = new["sides"]
        side_no = action.get("side")
        side = other = None
        if rule.takes_side:
            side_no = _side_number(side_no, rule.label, len(sides))
            side = sides[side_no - 1]
            other = sides[2 - side_no] if len(sides) == 2 else None
        raw = action.get("fields") or {}
        if not isinstance(raw, Mapping):
            raise ActionRefused(f"{rule.label}: fields must be a set of name: value")
        unknown = sorted(set(raw) - set(rule.fields))
        if unknown:
            raise ActionRefused(f"{rule.label} has no field {unknown[0]!r}")
        values = {name: f.clean(raw.get(name), rule.label) for name, f in rule.fields.items()}
        # When it was tapped (seconds, by the device's clock; 0 when unknown): the clock.
        values["at"] = float(action.get("at") or 0)
        player: dict[str, Any] | None = dict(self.player)
        player_name = values.get("player")
        players: dict[str, Any] = new["players"]
        if rule.takes_side and player_name:
            player = players.get(f"{side_no}:{player_name}", player)
        scope = Scope(
            new["match"], sides, self.rules, side=side, other=other, player=player, action=values
        )
        try:
            for test, reason in rule.require:
                if not test(scope):
                    raise ActionRefused(reason(scope))
            rule.effects(scope)
            if rule.takes_side and player_name and player != self.player:
                players[f"{side_no}:{player_name}"] = player
            self._settle(new)
        except RuleError as exc:
            # A value the file's author did not expect (e.g. a field left empty): say so.
            raise ActionRefused(
                f"{rule.label}: {self.name}'s rules cannot use this ({exc})"
            ) from None
        return new

    def _settle(self, state: dict[str, Any]) -> None:
        sides = state["sides"]
        scope = Scope(state["match"], sides, self.rules)
        if self.ranking is not None:
            state["ranks"] = self._ranks(state)
        if self.finish_when(scope):
            state["finished"] = True
            state["winner"] = self.winner(scope) if self.winner is not None else None
            if self.ranking is None and state["winner"]:
                state["ranks"] = [1 if i + 1 == state["winner"] else 2 for i in range(len(sides))]

    def _ranks(self, state: Mapping[str, Any]) -> list[int | None]:
        assert self.ranking is not None
        ranking = self.ranking
        marks: list[tuple[Any, int]] = []
        for index, side in enumerate(state["sides"]):
            scope = Scope(state["match"], state["sides"], self.rules, side=side)
            if ranking.only is not None and not ranking.only(scope):
                continue
            marks.append((ranking.by(scope), index))
        marks.sort(key=lambda m: m[0], reverse=ranking.descending)
        ranks: list[int | None] = [None] * len(state["sides"])
        for position, (mark, index) in enumerate(marks):
            tied = position > 0 and marks[position - 1][0] == mark
            ranks[index] = ranks[marks[position - 1][1]] if tied else position + 1
        return ranks

    def replay(self, sides: int, actions: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """The state from the start through `actions`: how undo recomputes a match exactly."""
        state = self.new_state(sides)
        for action in actions:
            state = self.apply(state, action)
        return state

    # -- what the unit shows --------------------------------------------------------------

    def side_values(self, state: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Each side's score, result and rank as the unit stores them (text, text, int)."""
        out: list[dict[str, Any]] = []
        ranks = state.get("ranks") or []
        for index, side in enumerate(state["sides"]):
            sides = state["sides"]
            other = sides[1 - index] if len(sides) == 2 else None
            scope = Scope(state["match"], sides, self.rules, side=side, other=other)
            values: dict[str, Any] = {"order": index + 1, "score": self.score(scope)}
            if self.result is not None:
                values["result"] = self.result(scope)
            rank = ranks[index] if index < len(ranks) else None
            if rank is not None:
                values["rank"] = rank
            out.append(values)
        return out

    def summary(self, state: Mapping[str, Any]) -> str:
        return " - ".join(str(v["score"]) for v in self.side_values(state))

    def describe(self) -> dict[str, Any]:
        """What the scorer console needs: its buttons, and the rules to show a tap at once."""
        return {
            "code": self.code,
            "name": self.name,
            "sides": self.sides,
            "actions": [a.describe() for a in self.actions.values()],
            "program": self.program(),
            "console": self.console.describe(),
        }

    def program(self) -> dict[str, Any]:
        """The rules as JSON; the console runs them on queued actions, the server decides."""
        ranking = self.ranking
        return {
            "rules": dict(self.rules),
            "match": dict(self.match),
            "side": dict(self.side),
            "player": dict(self.player),
            "actions": {
                name: {
                    "require": [
                        [expr_json(test.tree), template_json(reason)]
                        for test, reason in rule.require
                    ],
                    "effects": statements_json(rule.effects.tree),
                }
                for name, rule in self.actions.items()
            },
            "finish": expr_json(self.finish_when.tree),
            "winner": expr_json(self.winner.tree) if self.winner else None,
            "score": template_json(self.score),
            "result": template_json(self.result) if self.result else None,
            "ranking": {
                "by": expr_json(ranking.by.tree),
                "desc": ranking.descending,
                "only": expr_json(ranking.only.tree) if ranking.only else None,
            }
            if ranking
            else None,
        }


def _side_number(side_no: object, label: str, count: int) -> int:
    """The side an action names, 1 to `count` (a whole float from JSON counts)."""
    if isinstance(side_no, float) and side_no.is_integer():
        side_no = int(side_no)
    if not isinstance(side_no, int) or isinstance(side_no, bool):
        raise ActionRefused(f"{label}: say which side (1 to {count})")
    if not 1 <= side_no <= count:
        raise ActionRefused(f"{label}: there is no side {side_no}")
    return side_no
