"""Reading sport files: each key checked on load, each mistake named by its file, line and
field; the folder of sports, and which sport scores a discipline."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omnium_sports._expr import (
    Condition,
    Names,
    RuleError,
    Template,
    condition,
    effects,
    template,
)
from omnium_sports._sport import (
    CLOCK_VALUES,
    FIELD_TYPES,
    UNDO,
    ActionRule,
    ConsoleView,
    FieldRule,
    Ranking,
    Sport,
    SportFileError,
)

_CODE = re.compile(r"^[a-z][a-z0-9_]{1,39}$")
_TOP_KEYS = frozenset(
    {"code", "name", "disciplines", "sides", "rules", "match", "side", "player", "actions",
     "finish", "output", "ranking", "console"}
)  # fmt: skip
_CONSOLE_KEYS = frozenset({"period", "clock", "minute", "ask", "confirm", "numbers"})
_ACTION_KEYS = frozenset({"label", "side", "fields", "require", "effects", "group"})
_FIELD_KEYS = frozenset(
    {"type", "label", "required", "default", "min", "max", "choices", "max_length"}
)


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
        code, name, disciplines, sides = self.identity(data)
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
        actions = self.actions(data.get("actions"), plain)
        finish_when, winner = self.finish(data.get("finish"), plain)
        score, result = self.output(data.get("output"), with_sides)
        return Sport(
            code=code,
            name=name,
            disciplines=disciplines,
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
            ranking=self.ranking(data.get("ranking"), with_sides),
            path=self.path,
            source=self.text,
            console=self.console(data.get("console", {}), plain, actions),
        )

    def identity(self, data: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...], int]:
        """The sport's code (its file's name), name, disciplines and sides."""
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
        return code, name, tuple(disciplines), sides

    def actions(self, raw_actions: object, plain: Names) -> dict[str, ActionRule]:
        if not isinstance(raw_actions, Mapping) or not raw_actions:
            raise self.fail(["actions"], "a sport needs at least one [actions.<name>] table")
        return {name: self.action(name, raw, plain) for name, raw in raw_actions.items()}

    def action(self, action_name: str, raw: object, plain: Names) -> ActionRule:
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
        require = self.require([*keys, "require"], raw.get("require", []), names)
        if "effects" not in raw:
            raise self.fail(keys, 'says nothing about what it does: add effects = "..."')
        label = raw.get("label", action_name.replace("_", " ").capitalize())
        group = raw.get("group", "")
        if not isinstance(label, str) or not isinstance(group, str):
            raise self.fail(keys, "label and group are text")
        return ActionRule(
            action_name,
            label,
            takes_side,
            fields,
            require,
            self.rule([*keys, "effects"], effects, raw["effects"], names),
            group,
        )

    def require(
        self, keys: list[str], raw_require: object, names: Names
    ) -> tuple[tuple[Condition, Template], ...]:
        if not isinstance(raw_require, list):
            raise self.fail(keys, "is a list of { when, reason } tables")
        require: list[tuple[Condition, Template]] = []
        for item in raw_require:
            if not isinstance(item, Mapping) or set(item) != {"when", "reason"}:
                raise self.fail(keys, 'each check is { when = "...", reason = "what to do" }')
            require.append(
                (
                    self.rule(keys, condition, item["when"], names),
                    self.rule(keys, template, item["reason"], names),
                )
            )
        return tuple(require)

    def finish(self, finish: object, plain: Names) -> tuple[Condition, Condition | None]:
        if not isinstance(finish, Mapping) or "when" not in finish:
            raise self.fail(["finish"], 'say when a match is finished: [finish] when = "..."')
        finish_when = self.rule(["finish", "when"], condition, finish["when"], plain)
        winner = None
        if "winner" in finish:
            winner = self.rule(["finish", "winner"], condition, finish["winner"], plain)
        return finish_when, winner

    def output(self, output: object, with_sides: Names) -> tuple[Template, Template | None]:
        if not isinstance(output, Mapping) or "score" not in output:
            raise self.fail(["output"], 'say what a side\'s score shows: [output] score = "..."')
        score = self.rule(["output", "score"], template, output["score"], with_sides)
        result = None
        if "result" in output:
            result = self.rule(["output", "result"], template, output["result"], with_sides)
        return score, result

    def console(self, raw: object, plain: Names, actions: Mapping[str, ActionRule]) -> ConsoleView:
        if not isinstance(raw, Mapping):
            raise self.fail(["console"], "is a table: [console] period = ..., clock = ...")
        extra = sorted(set(raw) - _CONSOLE_KEYS)
        if extra:
            known = ", ".join(sorted(_CONSOLE_KEYS))
            raise self.fail(["console", extra[0]], f"is not a console key; they are {known}")
        period = None
        if "period" in raw:
            period = self.rule(["console", "period"], template, raw["period"], plain)
        clock = raw.get("clock", False)
        if not isinstance(clock, bool):
            raise self.fail(["console", "clock"], "is true when the match has a clock")
        missing = [name for name in CLOCK_VALUES if name not in plain.match]
        if clock and missing:
            raise self.fail(
                ["console", "clock"],
                f"the clock reads the match values {', '.join(CLOCK_VALUES)}: "
                f"add {', '.join(missing)} to [match]",
            )
        with_fields = {name: set(rule.fields) for name, rule in actions.items()}
        every_field = set().union(*with_fields.values())
        minute = raw.get("minute", "")
        if minute and minute not in every_field:
            raise self.fail(["console", "minute"], f"{minute!r} is not a field of any action")
        if minute and not clock:
            raise self.fail(["console", "minute"], "is filled in from the clock: set clock = true")
        return ConsoleView(
            period=period,
            clock=clock,
            minute=str(minute),
            ask=self.names(["console", "ask"], raw.get("ask", []), set(with_fields), "action"),
            confirm=self.names(
                ["console", "confirm"], raw.get("confirm", []), set(with_fields), "action"
            ),
            numbers=self.names(
                ["console", "numbers"], raw.get("numbers", []), every_field, "field"
            ),
        )

    def names(self, keys: list[str], raw: object, known: set[str], what: str) -> tuple[str, ...]:
        """A list of action or field names the file defines."""
        if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
            raise self.fail(keys, f'is a list of {what} names, e.g. ["goal"]')
        unknown = [n for n in raw if n not in known]
        if unknown:
            raise self.fail(
                keys,
                f"{unknown[0]!r} is not {'an' if what == 'action' else 'a'} {what} here; "
                f"there are {', '.join(sorted(known))}",
            )
        return tuple(raw)

    def ranking(self, raw_ranking: object, with_sides: Names) -> Ranking | None:
        if raw_ranking is None:
            return None
        if not isinstance(raw_ranking, Mapping) or "by" not in raw_ranking:
            raise self.fail(["ranking"], 'rank sides by a value: [ranking] by = "side.best"')
        order = raw_ranking.get("order", "desc")
        if order not in ("asc", "desc"):
            raise self.fail(["ranking", "order"], "is asc (lowest first) or desc")
        return Ranking(
            self.rule(["ranking", "by"], condition, raw_ranking["by"], with_sides),
            order == "desc",
            self.rule(["ranking", "only"], condition, raw_ranking["only"], with_sides)
            if "only" in raw_ranking
            else None,
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
