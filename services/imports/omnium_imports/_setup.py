"""Setting an integration up: its row, its mapping version, its lookups, reference data.

Every function here takes any asyncpg connection: a plain `asyncpg.connect()` one as well as
one from `omnium_db.create_pool` (JSON goes to and from PostgreSQL as text, so no codec is
needed). What a person gives is checked first: `SetupError` lists each problem with its place.
The file formats are in services/imports/README.md (integration, lookups) and README-reference.md.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import asyncpg

from omnium_imports._inputs import (
    Document,
    Problem,
    SetupError,
    Where,
    read_document,
    shown,
    unknown_fields,
)
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import LOOKUP_KINDS, MappingSpecError, MappingVersion

STATES = ("on", "paused", "off")
_CODE = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")
_EVENT = re.compile(r"^[A-Z0-9_-]{2,32}$")
_DISCIPLINE = re.compile(r"^[A-Z]{3}$")
_NOC = re.compile(r"^[A-Z]{3}$")
# A competitor's kind: "team" is a team; the others (and none) are one person.
COMPETITOR_KINDS = ("team", "person", "athlete", "pair")


@dataclass(frozen=True, slots=True)
class IntegrationSpec:
    code: str
    event_code: str
    name: str
    target: str  # "unit" or "medal_row"
    base_url: str
    job: str
    secret: str
    mapping: Mapping[str, Any]
    creates_units: bool = False
    check_seconds: int = 600
    state: str = "on"


async def register_integration(conn: asyncpg.Connection, spec: IntegrationSpec) -> str:
    """Create or update the integration and give it the mapping as its current version (the
    same mapping as the current version adds none). An integration that exists keeps its state.
    """
    version = _checked_mapping(spec.mapping, ("mapping",))
    if version.target != spec.target:
        raise SetupError(
            [
                Problem(
                    ("target",),
                    f"the integration's target is {spec.target!r} but its mapping's is "
                    f"{version.target!r}; they must be the same",
                )
            ]
        )
    async with conn.transaction():
        if await conn.fetchrow(QUERIES["event_by_code"], spec.event_code) is None:
            raise SetupError(
                [
                    Problem(
                        ("event",),
                        f"there is no event {spec.event_code!r}; load its reference first "
                        "(python -m omnium_imports reference load FILE)",
                    )
                ]
            )
        integration_id: str = await conn.fetchval(
            QUERIES["upsert_integration"],
            spec.code,
            spec.event_code,
            spec.name,
            spec.state,
            spec.target,
            spec.base_url,
            spec.job,
            spec.secret,
            spec.check_seconds,
            spec.creates_units,
        )
        await add_version(conn, integration_id, spec.mapping)
    return integration_id


async def add_version(
    conn: asyncpg.Connection,
    integration_id: str,
    mapping: Mapping[str, Any],
    note: str | None = None,
) -> tuple[int, bool]:
    """Make the mapping the integration's current version: (its version, whether it is new).
    The same mapping as the current version adds none. The mapping is checked first."""
    _checked_mapping(mapping, ())
    try:
        row = await conn.fetchrow(
            QUERIES["add_version"], integration_id, json.dumps(dict(mapping)), note
        )
    except asyncpg.ForeignKeyViolationError:
        row = None
    if row is None:
        raise SetupError(f"there is no integration {integration_id}")
    return int(row["current_version"]), bool(row["added"])


async def add_lookups(
    conn: asyncpg.Connection, integration_id: str, kind: str, ours: Mapping[str, str]
) -> None:
    """Scout's ids (keys) to ours (values), for the mapping's look-up steps."""
    await conn.execute(
        QUERIES["add_lookups"], integration_id, kind, list(ours), list(ours.values())
    )


async def resolve_ours(
    conn: asyncpg.Connection, integration_id: str, kind: str, ours: Sequence[str]
) -> list[str | None]:
    """Our ids for codes (or ids) of competitors or units of the integration's event, in order;
    None for one we do not have."""
    rows = await conn.fetch(QUERIES["resolve_ours"], integration_id, kind, list(ours))
    return [row["id"] for row in rows]


async def integration_id(conn: asyncpg.Connection, code: str) -> str | None:
    found: str | None = await conn.fetchval(QUERIES["integration_id_by_code"], code)
    return found


async def set_state(conn: asyncpg.Connection, code: str, state: str) -> str | None:
    """Turn the integration on, pause it or turn it off; its id, or None when there is none."""
    if state not in STATES:
        raise SetupError(f"state must be one of {', '.join(STATES)}, not {state!r}")
    found: str | None = await conn.fetchval(QUERIES["set_state"], code, state)
    return found


async def load_reference(conn: asyncpg.Connection, reference: Mapping[str, Any]) -> dict[str, str]:
    """The Games, disciplines and competitors from a reference listing (the format in
    services/imports/README.md; the Scout simulator serves one at /control/reference).
    Returns Scout's competitor ids → ours, for the lookups. A listing with problems is refused
    with a SetupError naming each, and nothing is written.
    """
    problems = check_reference(reference)
    if problems:
        raise SetupError(problems)
    event = reference["event"]
    async with conn.transaction():
        event_id = await conn.fetchval(
            QUERIES["upsert_event"],
            event["code"],
            event["name"],
            event["timeZone"],
            _date(event.get("firstDay")),
            _date(event.get("lastDay")),
        )
        disciplines = reference["disciplines"]
        await conn.execute(
            QUERIES["upsert_disciplines"],
            event_id,
            [d["code"] for d in disciplines],
            [d["name"] for d in disciplines],
        )
        competitors = reference["competitors"]
        await conn.execute(
            QUERIES["upsert_competitors"],
            event_id,
            [c["externalId"] for c in competitors],
            [c["name"] for c in competitors],
            [c["noc"] for c in competitors],
            ["team" if c.get("kind") == "team" else "person" for c in competitors],
            [c.get("discipline") for c in competitors],
        )
        rows = await conn.fetch(
            QUERIES["competitor_ids"], event_id, [c["externalId"] for c in competitors]
        )
    return {row["code"]: row["id"] for row in rows}


def _date(text: str | None) -> date | None:
    return date.fromisoformat(text) if text else None


def mapping_file(name: str) -> dict[str, Any]:
    """A default mapping shipped with the service (mappings/<name>.json)."""
    path = Path(__file__).with_name("mappings") / f"{name}.json"
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def default_mappings() -> list[str]:
    return sorted(p.stem for p in Path(__file__).with_name("mappings").glob("*.json"))


# -- the reference format -----------------------------------------------------------------------

REFERENCE_FIELDS = ("event", "disciplines", "competitors")
EVENT_FIELDS = ("code", "name", "timeZone", "firstDay", "lastDay")


def check_reference(reference: Any) -> list[Problem]:
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


def unread_fields(reference: Mapping[str, Any]) -> list[str]:
    """Top-level fields load_reference does not read (the simulator adds nocs, units, scout)."""
    return [name for name in reference if name not in REFERENCE_FIELDS]


_HINT = {
    "event": 'the Games: {"code": "AG2026", "name": "...", "timeZone": "Asia/Tokyo"}',
    "disciplines": 'a list like [{"code": "ATH", "name": "Athletics"}]',
    "competitors": 'a list like [{"externalId": "SC-P-00001", "name": "...", "noc": "KOR"}]',
}


def _text(obj: Mapping[str, Any], name: str, where: Where, problems: list[Problem]) -> Any:
    value = obj.get(name)
    if name not in obj:
        problems.append(Problem(where, f"it has no {name!r}"))
    elif not isinstance(value, str) or not value.strip():
        problems.append(Problem((*where, name), f"{name} must be a text, not {shown(value)}"))
    return value


def _check_event(event: Any) -> list[Problem]:
    where: Where = ("event",)
    if not isinstance(event, Mapping):
        return [Problem(where, f"the event must be an object: {_HINT['event']}")]
    problems: list[Problem] = []
    code = _text(event, "code", where, problems)
    if isinstance(code, str) and code.strip() and not _EVENT.match(code):
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


def _check_disciplines(disciplines: Any, codes: set[str]) -> list[Problem]:
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


def _check_competitors(competitors: Any, disciplines: set[str] | None) -> list[Problem]:
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


# -- the integration file -----------------------------------------------------------------------

INTEGRATION_FIELDS = (
    "code",
    "event",
    "name",
    "scout_url",
    "scout_job",
    "secret",
    "secret_file",
    "mapping",
    "target",
    "creates_units",
    "check_seconds",
    "state",
)


def integration_from(doc: Document) -> IntegrationSpec:
    """An integration file checked whole: every problem is raised at once, each with its line.
    A new integration starts paused unless the file says otherwise."""
    obj = doc.json()
    if not isinstance(obj, Mapping):
        raise doc.fail([Problem((), f"an integration is an object, not {shown(obj)}")])
    problems = unknown_fields(obj, INTEGRATION_FIELDS, ())
    for name in ("code", "event", "name", "scout_url", "scout_job", "mapping"):
        if name not in obj:
            problems.append(Problem((), f"it has no {name!r}: {_INTEGRATION_HINTS[name]}"))
    code = obj.get("code")
    if "code" in obj and (not isinstance(code, str) or not _CODE.match(code)):
        problems.append(
            Problem(
                ("code",),
                f"code {shown(code)} must be 2 to 63 small letters, digits or -, starting with "
                "a letter or digit, like games-schedule",
            )
        )
    event = obj.get("event")
    if "event" in obj and (not isinstance(event, str) or not _EVENT.match(event)):
        problems.append(
            Problem(("event",), f"event {shown(event)} must be the event's code, like AG2026")
        )
    title = obj.get("name")
    if "name" in obj and (not isinstance(title, str) or not title.strip()):
        problems.append(Problem(("name",), f"name must be a text, not {shown(title)}"))
    url = obj.get("scout_url")
    if "scout_url" in obj and not _is_url(url):
        problems.append(
            Problem(
                ("scout_url",),
                f"scout_url {shown(url)} must be Scout's base URL, like https://scout.example.org",
            )
        )
    job = obj.get("scout_job")
    if "scout_job" in obj and (not isinstance(job, str) or not re.match(r"^[^\s/?#]+$", job)):
        problems.append(
            Problem(("scout_job",), f"scout_job {shown(job)} must be Scout's job id, like schedule")
        )
    secret = _secret(obj, doc.folder, problems)
    mapping: dict[str, Any] | None = None
    if "mapping" in obj:
        try:
            mapping = _mapping_in(obj["mapping"], doc)
        except SetupError as exc:
            problems += exc.problems
    target = obj.get("target", mapping["target"] if mapping else "unit")
    if mapping is not None and target != mapping["target"]:
        problems.append(
            Problem(
                ("target",),
                f"target {shown(target)} differs from the mapping's target "
                f"{mapping['target']!r}; leave target out, or make them the same",
            )
        )
    creates_units = obj.get("creates_units", False)
    if not isinstance(creates_units, bool):
        problems.append(
            Problem(
                ("creates_units",),
                f"creates_units must be true or false, not {shown(creates_units)}",
            )
        )
    elif creates_units and (mapping["target"] if mapping else target) != "unit":
        problems.append(Problem(("creates_units",), "only a unit integration creates units"))
    check_seconds = obj.get("check_seconds", 600)
    if (
        not isinstance(check_seconds, int)
        or isinstance(check_seconds, bool)
        or not 10 <= check_seconds <= 86_400
    ):
        problems.append(
            Problem(
                ("check_seconds",),
                f"check_seconds must be a whole number of seconds from 10 to 86400, "
                f"not {shown(check_seconds)}",
            )
        )
    state = obj.get("state", "paused")
    if state not in STATES:
        problems.append(
            Problem(("state",), f"state must be one of {', '.join(STATES)}, not {shown(state)}")
        )
    if problems:
        raise doc.fail(problems)
    assert mapping is not None and secret is not None
    return IntegrationSpec(
        code=obj["code"],
        event_code=obj["event"],
        name=obj["name"].strip(),
        target=mapping["target"],
        base_url=obj["scout_url"].rstrip("/"),
        job=obj["scout_job"],
        secret=secret,
        mapping=mapping,
        creates_units=creates_units,
        check_seconds=check_seconds,
        state=state,
    )


_INTEGRATION_HINTS = {
    "code": 'our name for it, like "games-schedule"',
    "event": 'the event\'s code, like "AG2026"',
    "name": 'what the console calls it, like "Scout: schedule and results"',
    "scout_url": 'Scout\'s base URL, like "https://scout.example.org"',
    "scout_job": 'Scout\'s job id, like "schedule"',
    "mapping": 'a default mapping ("scout_units" or "scout_medals"), a mapping file, or one',
}


def _is_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _secret(obj: Mapping[str, Any], folder: Path, problems: list[Problem]) -> str | None:
    if ("secret" in obj) == ("secret_file" in obj):
        problems.append(
            Problem(
                (),
                "give exactly one of 'secret' (the text Scout signs its doorbells with) or "
                "'secret_file' (a file holding it, beside this one)",
            )
        )
        return None
    if "secret" in obj:
        secret = obj["secret"]
        if not isinstance(secret, str) or len(secret.strip()) < 8:
            problems.append(Problem(("secret",), "secret must be a text of at least 8 characters"))
            return None
        return secret.strip()
    given = obj["secret_file"]
    if not isinstance(given, str) or not given.strip():
        problems.append(
            Problem(("secret_file",), f"secret_file must be a path, not {shown(given)}")
        )
        return None
    path = folder / given
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        problems.append(Problem(("secret_file",), f"{path} could not be read: {exc.strerror}"))
        return None
    if len(text) < 8:
        problems.append(
            Problem(("secret_file",), f"{path} holds no secret of 8 or more characters")
        )
        return None
    return text.splitlines()[0].strip()


def _mapping_in(value: Any, doc: Document) -> dict[str, Any]:
    """The integration file's mapping: a default's name, a mapping file beside it, or inline."""
    if isinstance(value, Mapping):
        _checked_mapping(value, ("mapping",))
        return dict(value)
    if not isinstance(value, str) or not value.strip():
        raise SetupError(
            [
                Problem(
                    ("mapping",), f"mapping must be a name, a file or an object, not {shown(value)}"
                )
            ]
        )
    if value in default_mappings():
        return mapping_file(value)
    if not value.endswith(".json"):
        raise SetupError(
            [
                Problem(
                    ("mapping",),
                    f"{value!r} is not a default mapping ({', '.join(default_mappings())}); "
                    "a mapping file's name ends in .json",
                )
            ]
        )
    mapping_doc = read_document(str(doc.folder / value))
    return mapping_from(mapping_doc)


def mapping_from(doc: Document) -> dict[str, Any]:
    """A mapping file, checked as MappingVersion.parse checks it, its problem with its line."""
    obj = doc.json()
    try:
        _checked_mapping(obj, ())
    except SetupError as exc:
        raise doc.fail(exc.problems) from None
    return dict(obj)


def _checked_mapping(mapping: Any, prefix: Where) -> MappingVersion:
    try:
        return MappingVersion.parse(mapping)
    except MappingSpecError as exc:
        raise SetupError([Problem((*prefix, *_spec_where(str(exc))), str(exc))]) from None


def _spec_where(message: str) -> Where:
    """Where in the mapping a MappingSpecError points: "step 9 (each), inner step 2 ..." is
    steps[8].steps[1]; "the mapping's key_fields ..." is key_fields."""
    first = re.match(r"^step (\d+)", message)
    if first:
        where: Where = ("steps", int(first[1]) - 1)
        for inner in re.finditer(r"inner step (\d+)", message):
            where = (*where, "steps", int(inner[1]) - 1)
        return where
    named = re.match(r"^the mapping(?:'s (\w+)| has '(\w+)')", message)
    if named:
        return (named[1] or named[2],)
    return ()


# -- the lookups file ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LookupLine:
    """One lookup a person gave: Scout's id of a competitor or unit, and ours (a code or id)."""

    kind: str
    scout_id: str
    ours: str
    line: int | None
    where: Where


CSV_COLUMNS = ("kind", "scout_id", "ours", "name", "note")
_COLUMNS = ", ".join(CSV_COLUMNS)


def lookups_from(doc: Document, kind: str = "competitor") -> list[LookupLine]:
    """A CSV file (header: scout_id,ours and maybe kind, name, note) or a JSON one
    ({"competitor": {"SC-P-00001": "KOR-ATH-01"}}), checked whole."""
    if doc.name.lower().endswith(".json"):
        return _lookups_json(doc)
    return _lookups_csv(doc, kind)


def _lookups_csv(doc: Document, kind: str) -> list[LookupLine]:
    reader = csv.reader(io.StringIO(doc.text))
    header = next(reader, None)
    if header is None:
        raise doc.fail([Problem((), "the file is empty; its first line names the columns", line=1)])
    names = [h.strip() for h in header]
    problems = [
        Problem((name,), f"there is no column {name!r}; the columns are {_COLUMNS}", 1)
        for name in names
        if name not in CSV_COLUMNS
    ]
    for needed in ("scout_id", "ours"):
        if needed not in names:
            problems.append(
                Problem(
                    (),
                    f"the first line must name the columns, with {needed!r} among them, like "
                    "scout_id,ours",
                    line=1,
                )
            )
    if problems:
        raise doc.fail(problems)
    out: list[LookupLine] = []
    seen: dict[tuple[str, str], LookupLine] = {}
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            problems.append(
                Problem((), f"it has {len(row)} values; the first line names {len(names)}", line)
            )
            continue
        values = {name: cell.strip() for name, cell in zip(names, row, strict=True)}
        entry = _lookup(
            values.get("kind") or kind, values["scout_id"], values["ours"], line, (), problems
        )
        if entry is not None:
            _no_twice(entry, seen, problems)
            out.append(entry)
    if problems:
        raise doc.fail(problems)
    return out


def _lookups_json(doc: Document) -> list[LookupLine]:
    obj = doc.json()
    if not isinstance(obj, Mapping):
        raise doc.fail(
            [Problem((), 'lookups are an object like {"competitor": {"SC-P-00001": "KOR-ATH-01"}}')]
        )
    problems: list[Problem] = []
    out: list[LookupLine] = []
    seen: dict[tuple[str, str], LookupLine] = {}
    for kind, pairs in obj.items():
        if not isinstance(pairs, Mapping):
            problems.append(Problem((kind,), f"{kind} must be an object of Scout's ids to ours"))
            continue
        for scout_id, ours in pairs.items():
            entry = _lookup(kind, scout_id, ours, None, (kind, scout_id), problems)
            if entry is not None:
                _no_twice(entry, seen, problems)
                out.append(entry)
    if problems:
        raise doc.fail(problems)
    return out


def _lookup(
    kind: Any, scout_id: Any, ours: Any, line: int | None, where: Where, problems: list[Problem]
) -> LookupLine | None:
    if kind not in LOOKUP_KINDS:
        problems.append(
            Problem(
                where or ("kind",),
                f"kind {shown(kind)} is not one we look up; use {' or '.join(LOOKUP_KINDS)}",
                line,
            )
        )
        return None
    if not isinstance(scout_id, str) or not scout_id:
        problems.append(Problem(where or ("scout_id",), "scout_id is empty: give Scout's id", line))
        return None
    if not isinstance(ours, str) or not ours.strip():
        problems.append(
            Problem(where or ("ours",), f"ours is {shown(ours)}: give our code or our id", line)
        )
        return None
    return LookupLine(kind, scout_id, ours.strip(), line, where)


def _no_twice(
    entry: LookupLine, seen: dict[tuple[str, str], LookupLine], problems: list[Problem]
) -> None:
    first = seen.setdefault((entry.kind, entry.scout_id), entry)
    if first is not entry and first.ours != entry.ours:
        at = f"line {first.line}" if first.line else "above"
        problems.append(
            Problem(
                entry.where or ("scout_id",),
                f"{entry.kind} {entry.scout_id} is given twice, as {first.ours!r} ({at}) and "
                f"as {entry.ours!r}; keep one",
                entry.line,
            )
        )


async def resolve_lookups(
    conn: asyncpg.Connection, integration_id: str, entries: Sequence[LookupLine]
) -> dict[str, dict[str, str]]:
    """Our ids for the lines, by kind then Scout's id; a line naming nothing we have is a
    problem with its line."""
    problems: list[Problem] = []
    out: dict[str, dict[str, str]] = {}
    for kind in LOOKUP_KINDS:
        mine = [e for e in entries if e.kind == kind]
        if not mine:
            continue
        found = await resolve_ours(conn, integration_id, kind, [e.ours for e in mine])
        for entry, our_id in zip(mine, found, strict=True):
            if our_id is None:
                problems.append(
                    Problem(
                        entry.where or ("ours",),
                        f"we have no {kind} {entry.ours!r} in this integration's event; "
                        "load it with the reference, or give its exact code or id",
                        entry.line,
                    )
                )
            else:
                out.setdefault(kind, {})[entry.scout_id] = our_id
    if problems:
        raise SetupError(problems)
    return out
