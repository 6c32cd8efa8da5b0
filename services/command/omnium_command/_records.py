"""The records the road writes, their fields, how a value is checked, and the pure diff."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from omnium_db import UNIT_STATUSES
from omnium_grpc import canonical_id

MEDALS = ("GOLD", "SILVER", "BRONZE")


class BadValue(ValueError):
    """A value a person or a feed sent that cannot be stored; the message says why."""


# A check takes a value and returns it cleaned, or raises BadValue with what is wrong. The
# message leaves out the field's name: Kind.clean puts it in front, only when it fails.
Check = Callable[[object], object]


def text(*, required: bool, max_length: int) -> Check:
    def check(value: object) -> object:
        if value is None:
            if required:
                raise BadValue("cannot be empty")
            return None
        if not isinstance(value, str):
            raise BadValue(f"must be text, not {type(value).__name__}")
        value = value.strip()
        if required and not value:
            raise BadValue("cannot be empty")
        if len(value) > max_length:
            raise BadValue(f"is {len(value)} characters long; at most {max_length} fit")
        return value

    return check


def one_of(choices: tuple[str, ...], *, required: bool) -> Check:
    allowed = frozenset(choices)
    listed = ", ".join(choices)

    def check(value: object) -> object:
        if value is None and not required:
            return None
        if isinstance(value, str):
            if value in allowed:
                return value
            upper = value.upper()
            if upper in allowed:
                return upper
        raise BadValue(f"{value!r} is not one of {listed}")

    return check


def whole(*, minimum: int, required: bool) -> Check:
    def check(value: object) -> object:
        if value is None and not required:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadValue(f"must be a whole number, not {value!r}")
        if value < minimum:
            raise BadValue(f"must be {minimum} or more, not {value}")
        return value

    return check


def moment(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise BadValue(
                f"{value!r} is not a date and time; send ISO 8601 with an offset, "
                "e.g. 2026-09-20T09:30:00+09:00"
            ) from None
    else:
        raise BadValue(f"must be an ISO 8601 date and time, not {value!r}")
    if parsed.tzinfo is None:
        raise BadValue(f"{value!r} has no time zone offset; add one, e.g. +09:00")
    return parsed


def reference(value: object) -> str | None:
    if value is None:
        return None
    if (canonical := canonical_id(str(value))) is None:
        raise BadValue(f"{value!r} is not an id (a UUID)")
    return canonical


def noc(value: object) -> str:
    if not isinstance(value, str) or len(value) != 3 or not value.isalpha():
        raise BadValue(f"{value!r} is not a three-letter NOC code such as KOR")
    return value.upper()


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of record: its table's writable fields and how each value is checked."""

    name: str
    fields: Mapping[str, Check]

    def clean(self, values: Mapping[str, object], *, prefix: str = "") -> dict[str, object]:
        cleaned: dict[str, object] = {}
        for field, value in values.items():
            check = self.fields.get(field)
            if check is None:
                raise BadValue(
                    f"{prefix}{field} is not a field of a {self.name}; "
                    f"it has {', '.join(self.fields)}"
                )
            try:
                cleaned[field] = check(value)
            except BadValue as exc:
                raise BadValue(f"{prefix}{field} {exc}") from None
        return cleaned

    def check_names(self, names: Collection[str], *, prefix: str = "") -> None:
        for field in names:
            if field not in self.fields:
                raise BadValue(
                    f"{prefix}{field} is not a field of a {self.name}; "
                    f"it has {', '.join(self.fields)}"
                )


UNIT = Kind(
    "unit",
    {
        "name": text(required=True, max_length=200),
        "phase": text(required=False, max_length=60),
        "start_at": moment,
        "venue": text(required=False, max_length=200),
        "status": one_of(UNIT_STATUSES, required=True),
    },
)
SIDE = Kind(
    "side",
    {
        "competitor_id": reference,
        "score": text(required=False, max_length=60),
        "result": text(required=False, max_length=60),
        "rank": whole(minimum=1, required=False),
        "medal": one_of(MEDALS, required=False),
    },
)
MEDAL_ROW = Kind(
    "medal_row",
    {
        "gold": whole(minimum=0, required=True),
        "silver": whole(minimum=0, required=True),
        "bronze": whole(minimum=0, required=True),
        "total": whole(minimum=0, required=True),
        "rank": whole(minimum=1, required=False),
    },
)
COMPETITOR = Kind(
    "competitor",
    {"name": text(required=True, max_length=200), "noc": noc},
)
KINDS = {kind.name: kind for kind in (UNIT, SIDE, MEDAL_ROW, COMPETITOR)}


def same(old: object, new: object) -> bool:
    if new is None:
        # Cleared text is kept as "" in some columns (a unit's phase): that is nothing too.
        return old is None or old == ""
    if isinstance(new, datetime):
        if isinstance(old, str):
            old = datetime.fromisoformat(old)
        return isinstance(old, datetime) and old == new
    return bool(old == new)


def as_json(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(slots=True)
class FieldDiff:
    """What one command does to one record's fields."""

    changes: dict[str, tuple[object, object]]
    kept_by_hand: dict[str, tuple[object, object]]


def diff(
    current: Mapping[str, object],
    incoming: Mapping[str, object],
    pinned: Collection[str],
    *,
    respect_pins: bool,
) -> FieldDiff:
    """incoming − current − pinned: only fields whose value really differs, pins left alone.

    A pinned field that would change is reported as kept by hand; one that would not change
    is just unchanged.
    """
    changes: dict[str, tuple[object, object]] = {}
    kept: dict[str, tuple[object, object]] = {}
    for field, new in incoming.items():
        old = current.get(field)
        if same(old, new):
            continue
        if respect_pins and field in pinned:
            kept[field] = (old, new)
        else:
            changes[field] = (old, new)
    return FieldDiff(changes, kept)
