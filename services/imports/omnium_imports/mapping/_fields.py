"""The steps that write a field: from the row (read, template), from constants, or in place."""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass, field
from typing import Any

from omnium_imports.mapping._paths import (
    MISSING,
    SCALARS,
    SplitPath,
    is_path,
    own,
    shown,
    split,
    walk,
)
from omnium_imports.mapping._step import Args, Frame, Problem, Step, hint

_WHOLE = re.compile(r"^[+-]?[0-9]+(\.0*)?$")
_FORMATTER = string.Formatter()


@dataclass(frozen=True, slots=True)
class Read(Step):
    op = "read"
    path: str
    to: str
    required: bool = False
    _path: SplitPath = field(init=False, repr=False, compare=False)
    _name: str | None = field(init=False, repr=False, compare=False)  # a path of one part

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", split(self.path))
        object.__setattr__(self, "_name", self.path if len(self._path) == 1 else None)

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("path", "to", "required")
        return cls(args.path("path"), args.text("to"), args.flag("required", False))

    def apply(self, frame: Frame) -> None:
        source = frame.source
        # Most reads are one name from a plain dict: read it here, without the walk's loop.
        if self._name is not None and type(source) is dict:
            value = source.get(self._name, MISSING)
        else:
            value = walk(source, self._path)
        if value is MISSING:
            if self.required:
                raise Problem(
                    f"{frame.whose()} has no {self.path}, which this mapping needs; "
                    f"ask {frame.row.source_name} to send it, or drop 'required' from the step"
                )
            # Left out, not null: a field that is not sent is not compared, so nothing is cleared.
            frame.out.pop(self.to, None)
            return
        frame.out[self.to] = value if type(value) in SCALARS else own(value)


@dataclass(frozen=True, slots=True)
class Rename(Step):
    op = "rename"
    source: str
    to: str

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("from", "to")
        source, to = args.text("from"), args.text("to")
        if source == to:
            raise args.fail(f"'from' and 'to' are both {source!r}; nothing would move")
        return cls(source, to)

    def apply(self, frame: Frame) -> None:
        if self.source in frame.out:
            frame.out[self.to] = frame.out.pop(self.source)


@dataclass(frozen=True, slots=True)
class Default(Step):
    op = "default"
    field: str
    value: Any

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("field", "value")
        value = args.value("value")
        if value is None:
            raise args.fail("'value' is null, so the step would change nothing; give a value")
        return cls(args.text("field"), value)

    def apply(self, frame: Frame) -> None:
        if frame.out.get(self.field) is None:
            frame.out[self.field] = own(self.value)


@dataclass(frozen=True, slots=True)
class Template(Step):
    op = "template"
    to: str
    template: str
    parts: tuple[tuple[str, str | None], ...]  # literal text, then a name or None
    _paths: tuple[SplitPath, ...] = field(init=False, repr=False, compare=False)  # one per part

    def __post_init__(self) -> None:
        paths = tuple(split(name) if name is not None else () for _, name in self.parts)
        object.__setattr__(self, "_paths", paths)

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("to", "template")
        template = args.value("template")
        if not isinstance(template, str) or not template:
            raise args.fail(f"'template' must be {hint('template')}")
        try:
            parsed = list(_FORMATTER.parse(template))
        except ValueError as exc:
            raise args.fail(
                f"'template' {template!r} has braces that do not pair ({exc}); "
                "write {name} for a field and {{ or }} for a brace itself"
            ) from None
        parts: list[tuple[str, str | None]] = []
        for literal, name, spec, conversion in parsed:
            if name is not None and (not is_path(name) or spec or conversion):
                raise args.fail(
                    f"'template' {template!r} has {{{name}{'!' + conversion if conversion else ''}"
                    f"{':' + spec if spec else ''}}}; write plain names like {{event}}"
                )
            parts.append((literal, name))
        if all(name is None for _, name in parts):
            raise args.fail(f"'template' {template!r} names no field; use 'set' for a fixed text")
        return cls(args.text("to"), template, tuple(parts))

    def apply(self, frame: Frame) -> None:
        pieces: list[str] = []
        for (literal, name), path in zip(self.parts, self._paths, strict=True):
            pieces.append(literal)
            if name is None:
                continue
            value = frame.output(name)
            if value is MISSING or value is None:
                value = frame.read(path)
            if value is MISSING or value is None:
                raise Problem(
                    f"{frame.at()}the template for {self.to} needs {{{name}}}, but "
                    f"{frame.whose()} has no {name}; ask {frame.row.source_name} to send it, "
                    "or give it a default first"
                )
            pieces.append(str(value))
        frame.out[self.to] = "".join(pieces)


def _whole_number(value: object) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str) and _WHOLE.match(value.strip()):
        return int(value.strip().split(".")[0])
    return None


@dataclass(frozen=True, slots=True)
class Integer(Step):
    op = "integer"
    field: str

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("field")
        return cls(args.text("field"))

    def apply(self, frame: Frame) -> None:
        current = frame.out.get(self.field)
        # A plain int is already whole: the usual case, settled without a call.
        if current is None or type(current) is int:
            return
        number = _whole_number(current)
        if number is None:
            raise Problem(
                f"{frame.at()}{self.field} {shown(current)} is not a whole number; "
                f"check what {frame.row.source_name} shows for it"
            )
        frame.out[self.field] = number


@dataclass(frozen=True, slots=True)
class SetValue(Step):
    op = "set"
    to: str
    value: Any

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("to", "value")
        return cls(args.text("to"), args.value("value"))

    def apply(self, frame: Frame) -> None:
        frame.out[self.to] = own(self.value)
