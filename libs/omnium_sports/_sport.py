"""A sport read from its settings file: checked on load, then applied to a match's state."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omnium_sports._expr import (
    Condition,
    Effects,
    Names,
    RuleError,
    Scope,
    Template,
    condition,
    effects,
    expr_json,
    statements_json,
    template,
    template_json,
)

FIELD_TYPES = ("int", "number", "text", "choice", "bool")
UNDO = "undo"
_CODE = re.compile(r"^[a-z][a-z0-9_]{1,39}$")
_TOP_KEYS = frozenset(
    {"code", "name", "disciplines", "sides", "rules", "match", "side", "player", "actions",
     "finish", "output", "ranking"}
)  # fmt: skip
_ACTION_KEYS = frozenset({"label", "side", "fields", "require", "effects", "group"})
_FIELD_KEYS = frozenset(
    {"type", "label", "required", "default", "min", "max", "choices", "max_length"}
)


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


# -- loading ------------------------------------------------------------------------------


class _Locator:
    """Finds the line of a table or key in the file, so an error can name it."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def line(self, path: Sequence[str]) -> int:
        header = -1
        for depth in range(len(path), 0, -1):
            name = ".".join(path[:depth])
            for number, line in enumerate(self.lines):
                if line.strip() in (f"[{name}]", f"[[{name}]]"):
                    header = number
                    break
            if header >= 0:
                rest = path[depth:]
                if not rest:
                    return header + 1
                key = rest[0]
                for number in range(header + 1, len(self.lines)):
                    stripped = self.lines[number].strip()
                    if stripped.startswith("["):
                        break
                    if re.match(rf"^{re.escape(key)}\s*[=.]", stripped):
                        return number + 1
                return header + 1
        for number, line in enumerate(self.lines):
            if re.match(rf"^\s*{re.escape(path[-1])}\s*[=.]", line):
                return number + 1
        return 1


class _Loader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.where = _Locator(text)

    def fail(self, keys: Sequence[str], message: str, inner_line: int = 0) -> SportFileError:
        line = self.where.line(keys)
        if inner_line:
            # Multi-line effects start on the line after the opening quotes.
            line += inner_line if '"""' in self.where.lines[line - 1] else inner_line - 1
        return SportFileError(f"{self.path}, line {line}, {'.'.join(keys)}: {message}")

    def rule(self, keys: Sequence[str], build: Any, source: Any, names: Names) -> Any:
        try:
            return build(source, names)
        except RuleError as exc:
            message = str(exc)
            inner = 0
            found = re.match(r"^line (\d+): (.*)$", message, re.S)
            if found:
                inner, message = int(found[1]), found[2]
            raise self.fail(keys, message, inner) from None

    def values(self, keys: Sequence[str], raw: Any) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            raise self.fail(keys, "must be a table of name = starting value")
        for name, value in raw.items():
            if not re.match(r"^[a-z_][a-z0-9_]*$", name):
                raise self.fail([*keys, name], "names are lower case letters, digits and _")
            if not isinstance(value, (int, float, str, bool)):
                raise self.fail([*keys, name], "a starting value is a number, text or true/false")
        return dict(raw)

    def load(self) -> Sport:
        try:
            data = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            raise SportFileError(f"{self.path}: not valid TOML: {exc}") from None
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            raise self.fail(
                [unknown[0]],
                f"is not a sport file key; the keys are {', '.join(sorted(_TOP_KEYS))}",
            )
        code = data.get("code")
        if not isinstance(code, str) or not _CODE.match(code):
            raise self.fail(["code"], "give the sport a code: lower case letters, digits, _")
        stem = Path(self.path).stem
        if self.path and stem != code:
            raise self.fail(["code"], f"is {code!r} but the file is {stem}.toml: make them match")
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            raise self.fail(["name"], 'give the sport a name people read, e.g. "Football"')
        disciplines = data.get("disciplines", [])
        if not isinstance(disciplines, list) or not all(
            isinstance(d, str) and re.match(r"^[A-Z0-9]{3}$", d) for d in disciplines
        ):
            raise self.fail(["disciplines"], 'list ODF discipline codes, e.g. ["FBL"]')
        sides = data.get("sides", 2)
        if not isinstance(sides, int) or isinstance(sides, bool) or sides < 0:
            raise self.fail(["sides"], "is how many sides a match has (0: as many as the unit)")
        rules = self.values(["rules"], data.get("rules"))
        match = self.values(["match"], data.get("match"))
        side = self.values(["side"], data.get("side"))
        player = self.values(["player"], data.get("player"))
        plain = Names(
            frozenset(match),
            frozenset(side),
            frozenset(player),
            frozenset(rules),
            None,
            False,
        )
        with_sides = Names(plain.match, plain.side, plain.player, plain.rules, None, True)
        raw_actions = data.get("actions")
        if not isinstance(raw_actions, Mapping) or not raw_actions:
            raise self.fail(["actions"], "a sport needs at least one [actions.<name>] table")
        actions: dict[str, ActionRule] = {}
        for action_name, raw in raw_actions.items():
            keys = ["actions", action_name]
            if action_name == UNDO:
                raise self.fail(keys, "undo is built in: every sport has it; pick another name")
            if not re.match(r"^[a-z][a-z0-9_]*$", action_name):
                raise self.fail(keys, "action names are lower case letters, digits and _")
            if not isinstance(raw, Mapping):
                raise self.fail(keys, "must be a table")
            extra = sorted(set(raw) - _ACTION_KEYS)
            if extra:
                raise self.fail(
                    [*keys, extra[0]],
                    f"is not an action key; they are {', '.join(sorted(_ACTION_KEYS))}",
                )
            takes_side = raw.get("side", False)
            if not isinstance(takes_side, bool):
                raise self.fail([*keys, "side"], "is true when the scorer picks a side")
            fields = self.fields([*keys, "fields"], raw.get("fields", {}))
            names = Names(
                plain.match,
                plain.side,
                plain.player,
                plain.rules,
                frozenset({*fields, "at"}),
                takes_side,
            )
            require: list[tuple[Condition, Template]] = []
            raw_require = raw.get("require", [])
            if not isinstance(raw_require, list):
                raise self.fail([*keys, "require"], "is a list of { when, reason } tables")
            for item in raw_require:
                if not isinstance(item, Mapping) or set(item) != {"when", "reason"}:
                    raise self.fail(
                        [*keys, "require"],
                        'each check is { when = "...", reason = "what to do" }',
                    )
                require.append(
                    (
                        self.rule([*keys, "require"], condition, item["when"], names),
                        self.rule([*keys, "require"], template, item["reason"], names),
                    )
                )
            if "effects" not in raw:
                raise self.fail(keys, 'says nothing about what it does: add effects = "..."')
            label = raw.get("label", action_name.replace("_", " ").capitalize())
            group = raw.get("group", "")
            if not isinstance(label, str) or not isinstance(group, str):
                raise self.fail(keys, "label and group are text")
            actions[action_name] = ActionRule(
                action_name,
                label,
                takes_side,
                fields,
                tuple(require),
                self.rule([*keys, "effects"], effects, raw["effects"], names),
                group,
            )
        finish = data.get("finish")
        if not isinstance(finish, Mapping) or "when" not in finish:
            raise self.fail(["finish"], 'say when a match is finished: [finish] when = "..."')
        finish_when = self.rule(["finish", "when"], condition, finish["when"], plain)
        winner = None
        if "winner" in finish:
            winner = self.rule(["finish", "winner"], condition, finish["winner"], plain)
        output = data.get("output")
        if not isinstance(output, Mapping) or "score" not in output:
            raise self.fail(["output"], 'say what a side\'s score shows: [output] score = "..."')
        score = self.rule(["output", "score"], template, output["score"], with_sides)
        result = None
        if "result" in output:
            result = self.rule(["output", "result"], template, output["result"], with_sides)
        ranking = None
        raw_ranking = data.get("ranking")
        if raw_ranking is not None:
            if not isinstance(raw_ranking, Mapping) or "by" not in raw_ranking:
                raise self.fail(["ranking"], 'rank sides by a value: [ranking] by = "side.best"')
            order = raw_ranking.get("order", "desc")
            if order not in ("asc", "desc"):
                raise self.fail(["ranking", "order"], "is asc (lowest first) or desc")
            ranking = Ranking(
                self.rule(["ranking", "by"], condition, raw_ranking["by"], with_sides),
                order == "desc",
                self.rule(["ranking", "only"], condition, raw_ranking["only"], with_sides)
                if "only" in raw_ranking
                else None,
            )
        return Sport(
            code=code,
            name=name,
            disciplines=tuple(disciplines),
            sides=sides,
            rules=rules,
            match=match,
            side=side,
            player=player,
            actions=actions,
            finish_when=finish_when,
            winner=winner,
            score=score,
            result=result,
            ranking=ranking,
            path=self.path,
            source=self.text,
        )

    def fields(self, keys: list[str], raw: Any) -> dict[str, FieldRule]:
        if not isinstance(raw, Mapping):
            raise self.fail(keys, "is a table: fields.<name> = { type = ..., label = ... }")
        out: dict[str, FieldRule] = {}
        for name, spec in raw.items():
            here = [*keys, name]
            if not re.match(r"^[a-z][a-z0-9_]*$", name) or name == "at":
                raise self.fail(here, "field names are lower case letters, digits and _ (not at)")
            if not isinstance(spec, Mapping):
                raise self.fail(here, 'is a table: { type = "int", label = "Runs" }')
            extra = sorted(set(spec) - _FIELD_KEYS)
            if extra:
                raise self.fail(
                    here,
                    f"{extra[0]!r} is not a field key; they are {', '.join(sorted(_FIELD_KEYS))}",
                )
            kind = spec.get("type", "text")
            if kind not in FIELD_TYPES:
                raise self.fail(here, f"type {kind!r} is not one of {', '.join(FIELD_TYPES)}")
            choices = spec.get("choices", [])
            if kind == "choice" and (
                not isinstance(choices, list)
                or not choices
                or not all(isinstance(c, str) for c in choices)
            ):
                raise self.fail(here, 'a choice field lists its choices = ["a", "b"]')
            out[name] = FieldRule(
                name=name,
                type=kind,
                label=str(spec.get("label", name.replace("_", " ").capitalize())),
                required=bool(spec.get("required", False)),
                default=spec.get("default"),
                minimum=spec.get("min"),
                maximum=spec.get("max"),
                choices=tuple(choices),
                max_length=int(spec.get("max_length", 80)),
            )
        return out


def load_sport_text(text: str, path: str = "") -> Sport:
    """Read and check one sport file's text; SportFileError names the line and field."""
    return _Loader(path, text).load()


def load_sport(path: Path) -> Sport:
    return load_sport_text(path.read_text(encoding="utf-8"), str(path))


def load_sports(folder: Path) -> dict[str, Sport]:
    """Every `<code>.toml` in the folder, by code. One bad file stops the load, named."""
    sports: dict[str, Sport] = {}
    if not folder.is_dir():
        raise SportFileError(f"{folder} is not a folder of sport files")
    for path in sorted(folder.glob("*.toml")):
        sport = load_sport(path)
        sports[sport.code] = sport
    return sports


def sport_for_discipline(sports: Mapping[str, Sport], discipline: str) -> Sport | None:
    for sport in sports.values():
        if discipline in sport.disciplines:
            return sport
    return None


def _side_number(side_no: object, label: str, count: int) -> int:
    """The side an action names, 1 to `count` (a whole float from JSON counts)."""
    if isinstance(side_no, float) and side_no.is_integer():
        side_no = int(side_no)
    if not isinstance(side_no, int) or isinstance(side_no, bool):
        raise ActionRefused(f"{label}: say which side (1 to {count})")
    if not 1 <= side_no <= count:
        raise ActionRefused(f"{label}: there is no side {side_no}")
    return side_no
