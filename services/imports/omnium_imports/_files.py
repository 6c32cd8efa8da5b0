"""The files a person gives the command line: an integration, a mapping and lookups, each
checked whole, every problem with its place and line (`SetupError`). The formats are in
services/imports/README.md."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from omnium_imports._inputs import (
    Document,
    Problem,
    SetupError,
    Where,
    read_document,
    shown,
    unknown_fields,
)
from omnium_imports._reference import EVENT_CODE
from omnium_imports._scout import SCOUT_ID
from omnium_imports.mapping import LOOKUP_KINDS, MappingSpecError, MappingVersion
from omnium_outbound import url_problem
from omnium_settings import Settings

STATES = ("on", "paused", "off")
_CODE = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")


@dataclass(frozen=True, slots=True)
class IntegrationSpec:
    code: str
    event_code: str
    name: str
    target: str  # "unit" or "medal_row"
    base_url: str
    job: str
    secret: str
    mapping: Mapping[str, object]
    creates_units: bool = False
    # None: the service's OMNIUM_CHECK_SECONDS when it is added.
    check_seconds: int | None = None
    state: str = "on"
    # The integration's own settings over the service's (guard limits, missing keys).
    settings: Mapping[str, object] = field(default_factory=dict)


def mapping_file(name: str) -> dict[str, object]:
    """A default mapping shipped with the service (mappings/<name>.json)."""
    path = Path(__file__).with_name("mappings") / f"{name}.json"
    loaded: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def default_mappings() -> list[str]:
    return sorted(p.stem for p in Path(__file__).with_name("mappings").glob("*.json"))


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
    "settings",
)

# An integration's own settings: name -> (kind, lowest, highest, what it is).
INTEGRATION_SETTINGS: dict[str, tuple[type, float, float, str]] = {
    "min_share": (float, 0.0, 1.0, "share of the usual rows below which a run pauses"),
    "usual_runs": (int, 1, 100, "written runs whose median is the usual size"),
    "max_not_placed": (float, 0.0, 1.0, "share of rows naming what we lack that pauses"),
    "max_refused": (float, 0.0, 1.0, "share of rows that cannot be read that pauses"),
    "max_cleared": (int, 0, 1_000_000, "records one run may clear before it pauses"),
    "max_reopened": (int, 0, 1_000_000, "finished units one run may reopen before it pauses"),
    "missing_runs_to_review": (int, 1, 100, "full runs a key may be missing before a question"),
    "auto_cancel_missing": (bool, 0, 1, "cancel missing records without asking"),
    "alert_scout_failed_in_row": (int, 1, 100, "Scout runs failed in a row before an alert"),
    "alert_batch_failed_times": (int, 1, 100, "times a run's batches fail before an alert"),
    "alert_quiet_intervals": (int, 1, 1000, "check intervals with no new full run before an alert"),
}


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
    _check_names(obj, problems)
    secret = _secret(obj, doc.folder, problems)
    mapping: dict[str, object] | None = None
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
    check_seconds = obj.get("check_seconds")
    if check_seconds is not None and (
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
    settings = _integration_settings(obj.get("settings", {}), problems)
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
        target=str(mapping["target"]),  # checked: one of the targets
        base_url=obj["scout_url"].rstrip("/"),
        job=obj["scout_job"],
        secret=secret,
        mapping=mapping,
        creates_units=creates_units,
        check_seconds=check_seconds,
        state=state,
        settings=settings,
    )


def _integration_settings(given: object, problems: list[Problem]) -> dict[str, object]:
    """The file's `settings`, each checked; a name we do not know is refused by name, so a
    typo never leaves a guard at its default quietly."""
    if not isinstance(given, Mapping):
        problems.append(Problem(("settings",), f"settings is an object, not {shown(given)}"))
        return {}
    known = ", ".join(INTEGRATION_SETTINGS)
    checked: dict[str, object] = {}
    for name, value in given.items():
        if name not in INTEGRATION_SETTINGS:
            problems.append(
                Problem(
                    ("settings", name), f"there is no setting {name!r}; the settings are {known}"
                )
            )
            continue
        kind, lowest, highest, what = INTEGRATION_SETTINGS[name]
        fits = (
            isinstance(value, bool)
            if kind is bool
            else isinstance(value, int | float)
            and not isinstance(value, bool)
            and (kind is float or isinstance(value, int))
            and lowest <= value <= highest
        )
        if not fits:
            wanted = (
                "true or false"
                if kind is bool
                else f"a {'whole ' if kind is int else ''}number from {lowest:g} to {highest:g}"
            )
            problems.append(
                Problem(("settings", name), f"{name} ({what}) must be {wanted}, not {shown(value)}")
            )
            continue
        checked[name] = value
    return checked


def _check_names(obj: Mapping[str, object], problems: list[Problem]) -> None:
    """The integration's code, event, name and Scout address, each as its file gives it."""
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
    if "event" in obj and (not isinstance(event, str) or not EVENT_CODE.match(event)):
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
    if "scout_job" in obj and (not isinstance(job, str) or not SCOUT_ID.match(job)):
        problems.append(
            Problem(
                ("scout_job",),
                f"scout_job {shown(job)} must be Scout's job id, like schedule: 1 to 64 "
                "letters, digits, _ or -",
            )
        )


_INTEGRATION_HINTS = {
    "code": 'our name for it, like "games-schedule"',
    "event": 'the event\'s code, like "AG2026"',
    "name": 'what the console calls it, like "Scout: schedule and results"',
    "scout_url": 'Scout\'s base URL, like "https://scout.example.org"',
    "scout_job": 'Scout\'s job id, like "schedule"',
    "mapping": 'a default mapping ("scout_units" or "scout_medals"), a mapping file, or one',
}


def scout_address_problems(spec: IntegrationSpec, settings: Settings) -> list[Problem]:
    """Scout's address checked as omnium will call it (omnium_outbound), said when the file is
    saved; each call to Scout checks the address it connects to again. Resolving Scout's name
    blocks: from async code, call this in a thread."""
    refused = url_problem(spec.base_url, settings, what="scout_url")
    return [] if refused is None else [Problem(("scout_url",), refused)]


def _is_url(value: object) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _secret(obj: Mapping[str, object], folder: Path, problems: list[Problem]) -> str | None:
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
    return _secret_file(obj["secret_file"], folder, problems)


def _secret_file(given: object, folder: Path, problems: list[Problem]) -> str | None:
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


def _mapping_in(value: object, doc: Document) -> dict[str, object]:
    """The integration file's mapping: a default's name, a mapping file beside it, or inline."""
    if isinstance(value, Mapping):
        checked_mapping(value, ("mapping",))
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


def mapping_from(doc: Document) -> dict[str, object]:
    """A mapping file, checked as MappingVersion.parse checks it, its problem with its line."""
    obj = doc.json()
    try:
        checked_mapping(obj, ())
    except SetupError as exc:
        raise doc.fail(exc.problems) from None
    return dict(obj)


def checked_mapping(mapping: object, prefix: Where) -> MappingVersion:
    """The mapping checked as MappingVersion.parse checks it; its problem where it points."""
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
    kind: object,
    scout_id: object,
    ours: object,
    line: int | None,
    where: Where,
    problems: list[Problem],
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
