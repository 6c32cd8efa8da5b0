"""The steps that choose what is mapped: skip_if sets a row aside, each maps a list's elements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from omnium_imports.mapping._paths import MISSING, SplitPath, json_kind, shown, split, walk
from omnium_imports.mapping._step import Apply, Args, Frame, Problem, Skip, Step

SkipTest: TypeAlias = Literal["equals", "in", "missing"]


@dataclass(frozen=True, slots=True)
class SkipIf(Step):
    op = "skip_if"
    name: str  # the path or the output field, as `on` says
    on: Literal["path", "field"]
    test: SkipTest
    value: Any = None  # the value for "equals", the list for "in"
    reason: str = ""
    _path: SplitPath = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", split(self.name) if self.on == "path" else ())

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("path", "field", "equals", "in", "missing", "reason")
        if args.has("path") == args.has("field"):
            raise args.fail(
                "give exactly one of 'path' (a value in the row as sent) or 'field' "
                "(an output field an earlier step wrote)"
            )
        on: Literal["path", "field"] = "path" if args.has("path") else "field"
        name = args.path("path") if on == "path" else args.text("field")
        tests = [test for test in ("equals", "in", "missing") if args.has(test)]
        if len(tests) != 1:
            raise args.fail(
                "give exactly one test: 'equals' (a value), 'in' (a list of values) "
                "or 'missing' (true)"
            )
        reason = args.text("reason") if args.has("reason") else ""
        if tests[0] == "missing":
            if args.raw["missing"] is not True:
                raise args.fail("'missing' can only be true: skip the row when the value is absent")
            return cls(name, on, "missing", None, reason)
        if tests[0] == "in":
            values = args.raw["in"]
            if not isinstance(values, list) or not values:
                raise args.fail(f"'in' must be a list of values to skip, not {shown(values)}")
            return cls(name, on, "in", tuple(values), reason)
        return cls(name, on, "equals", args.raw["equals"], reason)

    def apply(self, frame: Frame) -> None:
        current = frame.read(self._path) if self.on == "path" else frame.output(self.name)
        present = current is not MISSING and current is not None
        if self.test == "missing":
            hit = not present
            why = f"{frame.whose()} has no {self.name}, and this mapping skips such rows"
        elif self.test == "equals":
            hit = present and current == self.value
            why = f"{frame.at()}{self.name} is {shown(current)}, which this mapping skips"
        else:
            hit = present and current in self.value
            why = f"{frame.at()}{self.name} is {shown(current)}, one of those this mapping skips"
        if hit:
            raise Skip(self.reason or why)


@dataclass(frozen=True, slots=True)
class Each(Step):
    op = "each"
    path: str
    to: str
    steps: tuple[Step, ...]
    _path: SplitPath = field(init=False, repr=False, compare=False)
    _applies: tuple[Apply, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", split(self.path))
        object.__setattr__(self, "_applies", tuple(step.apply for step in self.steps))

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("path", "to", "steps")
        steps = args.steps("steps")
        return cls(args.path("path"), args.text("to"), steps)

    def apply(self, frame: Frame) -> None:
        items = walk(frame.source, self._path)
        if items is MISSING or items is None:
            frame.out.pop(self.to, None)
            return
        if not isinstance(items, list | tuple):
            raise Problem(
                f"{frame.at()}{self.path} is {json_kind(items)}, not a list; "
                f"check what {frame.row.source_name} sends"
            )
        mapped: list[dict[str, Any]] = []
        where = frame.where
        # One frame serves every element in turn: steps never keep it, and building a frame
        # (and its "competitors.3" text) per element was a good part of each's time.
        inner = Frame(frame.source, {}, frame.row, f"{where}.{self.path}" if where else self.path)
        applies = self._applies
        for index, item in enumerate(items):
            inner.index = index
            if type(item) is not dict and not isinstance(item, Mapping):
                raise Problem(f"{inner.where} is {json_kind(item)}, not an object")
            inner.source = item
            out: dict[str, Any] = {}
            inner.out = out
            try:
                for apply in applies:
                    apply(inner)
            except Skip:
                # Inside each, skip_if leaves out the element, not the whole row.
                continue
            mapped.append(out)
        frame.out[self.to] = mapped
