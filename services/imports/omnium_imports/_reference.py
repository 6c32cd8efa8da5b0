"""The reference format: an event, its disciplines and competitors, checked whole before
`load_reference` writes any of it. The format is in services/imports/README-reference.md."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from omnium_imports._inputs import Problem, Where, shown

EVENT_CODE = re.compile(r"^[A-Z0-9_-]{2,32}$")
_DISCIPLINE = re.compile(r"^[A-Z]{3}$")
_NOC = re.compile(r"^[A-Z]{3}$")
# A competitor's kind: "team" is a team; the others (and none) are one person.
COMPETITOR_KINDS = ("team", "person", "athlete", "pair")

REFERENCE_FIELDS = ("event", "disciplines", "competitors")
EVENT_FIELDS = ("code", "name", "timeZone", "firstDay", "lastDay")


def check_reference(reference: object) -> list[Problem]:
    """Every problem of a reference listing, each with its place (`competitors[12].noc`)."""
    if not isinstance(reference, Mapping):
        return [
            Problem(
                (),
                "a reference is an object with event, disciplines and competitors, "
                f"not {shown(reference)}",
            )
        ]
    problems: list[Problem] = []
    for name in REFERENCE_FIELDS:
        if name not in reference:
            problems.append(Problem((), f"the reference has no {name!r}; it needs {_HINT[name]}"))
    event = reference.get("event")
    if event is not None:
        problems += _check_event(event)
    codes: set[str] = set()
    disciplines = reference.get("disciplines")
    if disciplines is not None:
        problems += _check_disciplines(disciplines, codes)
    competitors = reference.get("competitors")
    if competitors is not None:
        problems += _check_competitors(competitors, codes if disciplines is not None else None)
    return problems


def unread_fields(reference: Mapping[str, object]) -> list[str]:
    """Top-level fields load_reference does not read (the simulator adds nocs, units, scout)."""
    return [name for name in reference if name not in REFERENCE_FIELDS]


_HINT = {
    "event": 'the Games: {"code": "AG2026", "name": "...", "timeZone": "Asia/Tokyo"}',
    "disciplines": 'a list like [{"code": "ATH", "name": "Athletics"}]',
    "competitors": 'a list like [{"externalId": "SC-P-00001", "name": "...", "noc": "KOR"}]',
}


def _text(obj: Mapping[str, object], name: str, where: Where, problems: list[Problem]) -> object:
    value = obj.get(name)
    if name not in obj:
        problems.append(Problem(where, f"it has no {name!r}"))
    elif not isinstance(value, str) or not value.strip():
        problems.append(Problem((*where, name), f"{name} must be a text, not {shown(value)}"))
    return value


def _check_event(event: object) -> list[Problem]:
    where: Where = ("event",)
    if not isinstance(event, Mapping):
        return [Problem(where, f"the event must be an object: {_HINT['event']}")]
    problems: list[Problem] = []
    code = _text(event, "code", where, problems)
    if isinstance(code, str) and code.strip() and not EVENT_CODE.match(code):
        problems.append(
            Problem(
                (*where, "code"),
                f"the event's code {code!r} must be 2 to 32 capital letters, digits, - or _, "
                "like AG2026",
            )
        )
    _text(event, "name", where, problems)
    zone = _text(event, "timeZone", where, problems)
    if isinstance(zone, str) and zone.strip():
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(
                Problem(
                    (*where, "timeZone"),
                    f"{zone!r} is not a time zone name; use an IANA name like 'Asia/Tokyo'",
                )
            )
    days: dict[str, date] = {}
    for name in ("firstDay", "lastDay"):
        value = event.get(name)
        if value is None:
            continue
        try:
            days[name] = date.fromisoformat(value)
        except (TypeError, ValueError):
            problems.append(
                Problem(
                    (*where, name), f"{name} must be a date like '2026-09-19', not {shown(value)}"
                )
            )
    if len(days) == 2 and days["lastDay"] < days["firstDay"]:
        problems.append(Problem((*where, "lastDay"), "lastDay is before firstDay"))
    return problems


def _check_disciplines(disciplines: object, codes: set[str]) -> list[Problem]:
    if not isinstance(disciplines, list):
        return [Problem(("disciplines",), f"disciplines must be {_HINT['disciplines']}")]
    problems: list[Problem] = []
    for n, discipline in enumerate(disciplines):
        where: Where = ("disciplines", n)
        if not isinstance(discipline, Mapping):
            problems.append(Problem(where, f"a discipline is an object, not {shown(discipline)}"))
            continue
        code = _text(discipline, "code", where, problems)
        _text(discipline, "name", where, problems)
        if not isinstance(code, str) or not code.strip():
            continue
        if not _DISCIPLINE.match(code):
            problems.append(
                Problem(
                    (*where, "code"),
                    f"the discipline code {code!r} must be three capital letters, like ATH",
                )
            )
        elif code in codes:
            problems.append(Problem((*where, "code"), f"discipline {code} is listed twice"))
        codes.add(code)
    return problems


def _check_competitors(competitors: object, disciplines: set[str] | None) -> list[Problem]:
    if not isinstance(competitors, list):
        return [Problem(("competitors",), f"competitors must be {_HINT['competitors']}")]
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for n, competitor in enumerate(competitors):
        where: Where = ("competitors", n)
        if not isinstance(competitor, Mapping):
            problems.append(Problem(where, f"a competitor is an object, not {shown(competitor)}"))
            continue
        external_id = _text(competitor, "externalId", where, problems)
        if isinstance(external_id, str) and external_id.strip():
            if external_id in seen:
                problems.append(
                    Problem(
                        (*where, "externalId"),
                        f"{external_id} is listed twice (also competitors[{seen[external_id]}])",
                    )
                )
            seen.setdefault(external_id, n)
        _text(competitor, "name", where, problems)
        noc = _text(competitor, "noc", where, problems)
        if isinstance(noc, str) and noc.strip() and not _NOC.match(noc):
            problems.append(
                Problem((*where, "noc"), f"the NOC {noc!r} must be three capital letters, like KOR")
            )
        discipline = competitor.get("discipline")
        if discipline is not None and disciplines is not None and discipline not in disciplines:
            problems.append(
                Problem(
                    (*where, "discipline"),
                    f"discipline {shown(discipline)} is not one of the reference's disciplines "
                    f"({', '.join(sorted(disciplines)) or 'none'})",
                )
            )
        kind = competitor.get("kind")
        if kind is not None and kind not in COMPETITOR_KINDS:
            problems.append(
                Problem(
                    (*where, "kind"),
                    f"kind {shown(kind)} is not one we know; use {', '.join(COMPETITOR_KINDS)} "
                    "(team is a team, the others one person)",
                )
            )
    return problems
