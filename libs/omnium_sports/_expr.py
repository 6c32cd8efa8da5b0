"""The small, safe language of sport files: conditions, effects and text templates."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Roots an expression may name besides the match's own state names.
SIDE_ROOTS = ("side", "other")
ROOTS = (*SIDE_ROOTS, "player", "action", "rules", "sides", "match")


def _text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs, "text": _text}
CONSTANTS = {"true": True, "false": False, "True": True, "False": False}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


class RuleError(ValueError):
    """A sport file's expression is not in the language, or names something unknown."""


@dataclass(frozen=True, slots=True)
class Names:
    """What an expression may name: used to check a sport file when it is loaded."""

    match: frozenset[str]
    side: frozenset[str]
    player: frozenset[str]
    rules: frozenset[str]
    action: frozenset[str] | None  # None: no action in scope (finish, output, ranking)
    has_side: bool  # the action names a side, so `side` and `other` exist


class Scope:
    """The values one evaluation sees. Side and player are the dicts effects write into."""

    __slots__ = ("action", "match", "other", "player", "rules", "side", "sides")

    def __init__(
        self,
        match: dict[str, Any],
        sides: list[dict[str, Any]],
        rules: Mapping[str, object],
        *,
        side: dict[str, Any] | None = None,
        other: dict[str, Any] | None = None,
        player: dict[str, Any] | None = None,
        action: Mapping[str, object] | None = None,
    ) -> None:
        self.match = match
        self.sides = sides
        self.rules = rules
        self.side = side
        self.other = other
        self.player = player
        self.action = action


def _fail(node: ast.AST, message: str) -> RuleError:
    return RuleError(f"line {getattr(node, 'lineno', 1)}: {message}")


def _known(what: str, names: frozenset[str]) -> str:
    return f"{what} has {', '.join(sorted(names))}" if names else f"{what} has no names"


class _Checker:
    def __init__(self, names: Names) -> None:
        self.names = names

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise _fail(node, "assign one name at a time")
            self.target(node.targets[0])
            self.expr(node.value)
        elif isinstance(node, ast.AugAssign):
            if type(node.op) not in _BINARY:
                raise _fail(node, "only + - * / // % can be combined with =")
            self.target(node.target)
            self.expr(node.value)
        elif isinstance(node, ast.If):
            self.expr(node.test)
            for child in (*node.body, *node.orelse):
                self.statement(child)
        elif isinstance(node, ast.Pass):
            return
        else:
            raise _fail(node, "an effect is `name = value`, `name += value`, `if ...:` or `pass`")

    def target(self, node: ast.expr) -> None:
        if isinstance(node, ast.Name):
            if node.id not in self.names.match:
                raise _fail(
                    node, f"{node.id!r} is not a match value; {_known('[match]', self.names.match)}"
                )
            return
        if isinstance(node, ast.Attribute):
            root = self._root(node.value)
            if root in ("action", "rules", "match"):
                if root == "match":
                    self._attribute(node)
                    return
                raise _fail(node, f"{root}.{node.attr} cannot be changed")
            self._attribute(node)
            return
        raise _fail(node, "only a match value, side.x, other.x, sides[n].x or player.x can be set")

    def _root(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name) and node.id in ROOTS and node.id != "sides":
            return node.id
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "sides"
        ):
            self.expr(node.slice)
            return "sides"
        raise _fail(node, "write side.x, other.x, sides[n].x, player.x, action.x or rules.x")

    def _attribute(self, node: ast.Attribute) -> None:
        root = self._root(node.value)
        names = self.names
        if root in SIDE_ROOTS and not names.has_side:
            raise _fail(node, f"{root}.{node.attr}: this action names no side (set side = true)")
        if root == "action" and names.action is None:
            raise _fail(node, f"action.{node.attr}: there is no action here")
        allowed = {
            "side": names.side,
            "other": names.side,
            "sides": names.side,
            "player": names.player,
            "action": names.action or frozenset(),
            "rules": names.rules,
            "match": names.match,
        }[root]
        if node.attr not in allowed:
            where = {"side": "[side]", "other": "[side]", "sides": "[side]", "player": "[player]"}
            label = where.get(
                root, {"action": "the action's fields", "rules": "[rules]"}.get(root, "[match]")
            )
            raise _fail(node, f"{root}.{node.attr} is unknown; {_known(label, allowed)}")

    def expr(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str)) or node.value is None:
                raise _fail(node, f"{node.value!r} is not a number, text or true/false")
        elif isinstance(node, ast.Name):
            if node.id not in self.names.match and node.id not in CONSTANTS:
                raise _fail(node, f"{node.id!r} is unknown; {_known('[match]', self.names.match)}")
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
        else:
            for operand in _operands(node):
                self.expr(operand)


def _operands(node: ast.expr) -> list[ast.expr]:
    """The operands of an operation, in order, once its operator is one the language has."""
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise _fail(node, "only + - * / // % are allowed")
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise _fail(node, "only -x and not x are allowed")
        return [node.operand]
    if isinstance(node, ast.BoolOp):
        return node.values
    if isinstance(node, ast.Compare):
        if any(type(op) not in _COMPARE for op in node.ops):
            raise _fail(node, "compare with == != < <= > >=")
        return [node.left, *node.comparators]
    if isinstance(node, ast.IfExp):
        return [node.test, node.body, node.orelse]
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise _fail(node, f"the functions are {', '.join(FUNCTIONS)}")
        if node.keywords or not node.args:
            raise _fail(node, f"{node.func.id}() takes plain values")
        return node.args
    raise _fail(node, f"{type(node).__name__} is not part of the sport file language")


def _side_of(scope: Scope, index: object, node: ast.AST) -> dict[str, Any]:
    if not isinstance(index, int) or isinstance(index, bool) or not 1 <= index <= len(scope.sides):
        raise _fail(node, f"sides[{index!r}]: there are sides 1 to {len(scope.sides)}")
    return scope.sides[index - 1]


def _holder(scope: Scope, node: ast.expr) -> Any:
    if isinstance(node, ast.Subscript):
        return _side_of(scope, evaluate(node.slice, scope), node)
    assert isinstance(node, ast.Name)
    if node.id == "match":
        return scope.match
    return getattr(scope, node.id)


def evaluate(node: ast.expr, scope: Scope) -> Any:
    step = _EVALUATE.get(type(node))
    if step is None:
        raise _fail(node, f"{type(node).__name__} cannot be evaluated")
    return step(node, scope)


def _constant(node: ast.Constant, scope: Scope) -> object:
    return node.value


def _name(node: ast.Name, scope: Scope) -> object:
    if node.id in scope.match:
        return scope.match[node.id]
    if node.id in CONSTANTS:
        return CONSTANTS[node.id]
    raise _fail(node, f"{node.id!r} has no value in this match")


def _attribute_value(node: ast.Attribute, scope: Scope) -> object:
    holder = _holder(scope, node.value)
    if holder is None:
        return None
    return holder.get(node.attr)


def _binary(node: ast.BinOp, scope: Scope) -> object:
    left, right = evaluate(node.left, scope), evaluate(node.right, scope)
    try:
        return _BINARY[type(node.op)](left, right)
    except (TypeError, ZeroDivisionError) as exc:
        raise _fail(node, f"cannot work out {ast.unparse(node)}: {exc}") from None


def _unary(node: ast.UnaryOp, scope: Scope) -> object:
    value = evaluate(node.operand, scope)
    if isinstance(node.op, ast.Not):
        return not value
    return -value if isinstance(node.op, ast.USub) else +value


def _boolean(node: ast.BoolOp, scope: Scope) -> object:
    """`and` and `or` as Python has them: the first value that settles it, not True/False."""
    if isinstance(node.op, ast.And):
        result: object = True
        for value_node in node.values:
            result = evaluate(value_node, scope)
            if not result:
                return result
        return result
    result = False
    for value_node in node.values:
        result = evaluate(value_node, scope)
        if result:
            return result
    return result


def _compare(node: ast.Compare, scope: Scope) -> bool:
    left = evaluate(node.left, scope)
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        right = evaluate(right_node, scope)
        try:
            if not _COMPARE[type(op)](left, right):
                return False
        except TypeError:
            raise _fail(node, f"cannot compare {left!r} with {right!r}") from None
        left = right
    return True


def _if_else(node: ast.IfExp, scope: Scope) -> object:
    chosen = node.body if evaluate(node.test, scope) else node.orelse
    return evaluate(chosen, scope)


def _call(node: ast.Call, scope: Scope) -> object:
    assert isinstance(node.func, ast.Name)
    return FUNCTIONS[node.func.id](*(evaluate(a, scope) for a in node.args))


# One evaluator per kind of node the checker lets through (the parser makes exactly these types).
_EVALUATE: dict[type[ast.expr], Callable[[Any, Scope], object]] = {
    ast.Constant: _constant,
    ast.Name: _name,
    ast.Attribute: _attribute_value,
    ast.BinOp: _binary,
    ast.UnaryOp: _unary,
    ast.BoolOp: _boolean,
    ast.Compare: _compare,
    ast.IfExp: _if_else,
    ast.Call: _call,
}


def run(statements: list[ast.stmt], scope: Scope) -> None:
    for node in statements:
        if isinstance(node, ast.Assign):
            _store(node.targets[0], evaluate(node.value, scope), scope)
        elif isinstance(node, ast.AugAssign):
            current = evaluate(node.target, scope)
            value = evaluate(node.value, scope)
            try:
                _store(node.target, _BINARY[type(node.op)](current, value), scope)
            except TypeError as exc:
                raise _fail(node, f"cannot work out {ast.unparse(node)}: {exc}") from None
        elif isinstance(node, ast.If):
            run(node.body if evaluate(node.test, scope) else node.orelse, scope)


def _store(target: ast.expr, value: object, scope: Scope) -> None:
    if isinstance(target, ast.Name):
        scope.match[target.id] = value
        return
    assert isinstance(target, ast.Attribute)
    holder = _holder(scope, target.value)
    if holder is not None:
        holder[target.attr] = value


@dataclass(frozen=True, slots=True)
class Condition:
    source: str
    tree: ast.expr

    def __call__(self, scope: Scope) -> Any:
        return evaluate(self.tree, scope)


@dataclass(frozen=True, slots=True)
class Effects:
    source: str
    tree: list[ast.stmt]

    def __call__(self, scope: Scope) -> None:
        run(self.tree, scope)


@dataclass(frozen=True, slots=True)
class Template:
    """Text with {expression} parts, e.g. "the set is over: start set {set + 1} first"."""

    source: str
    parts: tuple[str | Condition, ...]

    def __call__(self, scope: Scope) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = part(scope)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            out.append("" if value is None else str(value))
        return "".join(out)


def _parse(source: str, mode: str) -> ast.AST:
    try:
        return ast.parse(source.strip("\n") if mode == "exec" else source.strip(), mode=mode)
    except SyntaxError as exc:
        raise RuleError(f"line {exc.lineno or 1}: {exc.msg} in {source.strip()!r}") from None


def condition(source: object, names: Names) -> Condition:
    if isinstance(source, bool):
        source = "true" if source else "false"
    if not isinstance(source, str) or not source.strip():
        raise RuleError('must be an expression in quotes, e.g. "side.points >= 21"')
    tree = _parse(source, "eval")
    assert isinstance(tree, ast.Expression)
    _Checker(names).expr(tree.body)
    return Condition(source, tree.body)


def effects(source: object, names: Names) -> Effects:
    if isinstance(source, list):
        source = "\n".join(str(line) for line in source)
    if not isinstance(source, str):
        raise RuleError('must be text: one effect a line, e.g. "side.goals += 1"')
    tree = _parse(source, "exec")
    assert isinstance(tree, ast.Module)
    checker = _Checker(names)
    for node in tree.body:
        checker.statement(node)
    return Effects(source, tree.body)


_PART = re.compile(r"\{([^{}]+)\}")


def template(source: object, names: Names) -> Template:
    if not isinstance(source, str):
        raise RuleError('must be text, e.g. "{side.goals}"')
    parts: list[str | Condition] = []
    last = 0
    for found in _PART.finditer(source):
        parts.append(source[last : found.start()])
        parts.append(condition(found[1], names))
        last = found.end()
    parts.append(source[last:])
    return Template(source, tuple(p for p in parts if p != ""))


# -- the same programs as JSON, for the scorer console's own copy of the rules --------------

_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.USub: "-",
    ast.UAdd: "+",
    ast.Not: "not",
}


def expr_json(node: ast.expr) -> Any:
    """A checked expression as nested lists, evaluated by the console exactly as here."""
    shape = _JSON.get(type(node))
    if shape is None:
        raise RuleError(f"{type(node).__name__} cannot be sent to the console")
    return shape(node)


def _attribute_json(node: ast.Attribute) -> list[object]:
    holder = node.value
    if isinstance(holder, ast.Subscript):
        return ["attr", ["sides", expr_json(holder.slice)], node.attr]
    assert isinstance(holder, ast.Name)
    return ["attr", ["root", holder.id], node.attr]


def _call_json(node: ast.Call) -> list[object]:
    assert isinstance(node.func, ast.Name)
    return ["call", node.func.id, [expr_json(a) for a in node.args]]


_JSON: dict[type[ast.expr], Callable[[Any], list[object]]] = {
    ast.Constant: lambda node: ["c", node.value],
    ast.Name: lambda node: ["name", node.id],
    ast.Attribute: _attribute_json,
    ast.BinOp: lambda node: [
        "bin",
        _OPS[type(node.op)],
        expr_json(node.left),
        expr_json(node.right),
    ],
    ast.UnaryOp: lambda node: ["un", _OPS[type(node.op)], expr_json(node.operand)],
    ast.BoolOp: lambda node: [
        "and" if isinstance(node.op, ast.And) else "or",
        [expr_json(v) for v in node.values],
    ],
    ast.Compare: lambda node: [
        "cmp",
        expr_json(node.left),
        [_OPS[type(op)] for op in node.ops],
        [expr_json(v) for v in node.comparators],
    ],
    ast.IfExp: lambda node: [
        "if",
        expr_json(node.test),
        expr_json(node.body),
        expr_json(node.orelse),
    ],
    ast.Call: _call_json,
}


def statements_json(nodes: list[ast.stmt]) -> list[Any]:
    out: list[Any] = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            out.append(["set", expr_json(node.targets[0]), expr_json(node.value)])
        elif isinstance(node, ast.AugAssign):
            out.append(["aug", _OPS[type(node.op)], expr_json(node.target), expr_json(node.value)])
        elif isinstance(node, ast.If):
            out.append(
                [
                    "if",
                    expr_json(node.test),
                    statements_json(node.body),
                    statements_json(node.orelse),
                ]
            )
    return out


def template_json(template: Template) -> list[Any]:
    return [p if isinstance(p, str) else expr_json(p.tree) for p in template.parts]
