"""Feed documents: what a feed holds (read from the database) and its bytes in each format."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from xml.etree import ElementTree as ET

T = TypeVar("T")

DOCUMENT_TYPES = {"schedule": "DT_SCHEDULE", "results": "DT_RESULT", "medals": "DT_MEDALS"}
EXTENSIONS = {"json": "json", "csv": "csv", "odf": "xml"}
# A unit is in a results feed once it has started, or once any side has a score or result.
RESULT_STATUSES = frozenset({"RUNNING", "INTERRUPTED", "UNOFFICIAL", "OFFICIAL", "PROTESTED"})
_RESULT_FIELDS = ("score", "result", "rank", "medal")
_SIDE_FIELDS = ("competitor", "name", "noc", *_RESULT_FIELDS)
# What XML 1.0 allows (its Char production): every other character in a value would make the
# whole feed unparseable for the client, so it is dropped (a control character in a name read
# from a provider, a lone surrogate, U+FFFE).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# A spreadsheet takes a cell starting with one of these as a formula (OWASP's CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Numbers and times (-1, +0.356, -0:05, +1:02.35) start with a sign too; holding only digits and
# separators, they cannot call a function, so they stay as they are.
_SIGNED_NUMBER = re.compile(r"[+-]?\d+(?:[.,:]\d+)*")


@dataclass(frozen=True, slots=True)
class Document:
    """One feed's content, independent of its format."""

    kind: str  # schedule, results or medals
    competition: str  # the Games code, ODF CompetitionCode
    discipline: str | None  # None: the whole Games
    top_n: int | None
    rows: list[dict[str, Any]]

    @property
    def document_type(self) -> str:
        return DOCUMENT_TYPES[self.kind]

    @property
    def document_code(self) -> str:
        """The ODF RSC of the scope: a discipline, or GLO for the whole Games, padded to 34."""
        return (self.discipline or "GLO").ljust(34, "-")

    @property
    def subtype(self) -> str:
        return f"TOP{self.top_n}" if self.top_n else ""

    def file_name(self, fmt: str) -> str:
        """ODF's scheme: CompetitionCode_DocumentCode_DocumentType[_DocumentSubtype].ext. The
        name stays the same across versions, so each version replaces the last."""
        parts = [self.competition, self.document_code, self.document_type]
        if self.subtype:
            parts.append(self.subtype)
        return "_".join(parts) + "." + EXTENSIONS[fmt]

    def content_sha(self, fmt: str) -> str:
        """What decides whether a feed changed: its rows and format, not its version or stamp."""
        canonical = json.dumps(
            [fmt, self.kind, self.discipline, self.top_n, self.rows],
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


def unit_row(
    unit: Mapping[str, Any], competitors: Mapping[str, Mapping[str, Any]], *, results: bool
) -> dict[str, Any]:
    """One unit as every format shows it; `unit["sides"]` name competitors by id. A schedule
    shows who is on each side, not the results, so a score does not change it."""
    start = unit.get("start_at")
    sides = []
    for side in unit.get("sides") or ():
        # Sides read with the unit name their competitor; approved ones name only its id.
        who = side if "name" in side else competitors.get(str(side.get("competitor_id") or ""), {})
        row = {
            "order": side["order"],
            "competitor": who.get("competitor", who.get("code")),
            "name": who.get("name"),
            "noc": who.get("noc"),
        }
        if results:
            row.update({k: side.get(k) for k in _RESULT_FIELDS})
        sides.append(row)
    return {
        "code": unit["code"],
        "discipline": unit["discipline"],
        "name": unit["name"],
        "phase": unit.get("phase") or "",
        "start_at": start.isoformat() if isinstance(start, datetime) else start,
        "venue": unit.get("venue"),
        "status": unit["status"],
        "sides": sides,
    }


def has_results(unit: Mapping[str, Any]) -> bool:
    if unit["status"] in RESULT_STATUSES:
        return True
    return any(side.get("score") or side.get("result") for side in unit.get("sides") or ())


def render(document: Document, fmt: str, version: int, now: datetime) -> bytes:
    if fmt == "json":
        return _json(document, version)
    if fmt == "csv":
        return _csv(document)
    if fmt == "odf":
        return _odf(document, version, now)
    raise ValueError(f"unknown format {fmt!r}")


def _json(document: Document, version: int) -> bytes:
    body: dict[str, Any] = {
        "document_type": document.document_type,
        "competition": document.competition,
        "document_code": document.document_code,
        "discipline": document.discipline,
        "version": version,
    }
    if document.subtype:
        body["subtype"] = document.subtype
    body["medals" if document.kind == "medals" else "units"] = document.rows
    return (json.dumps(body, ensure_ascii=False, indent=1) + "\n").encode()


def _csv(document: Document) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if document.kind == "medals":
        writer.writerow(["rank", "noc", "gold", "silver", "bronze", "total"])
        for row in document.rows:
            writer.writerow(
                [_cell(row[k]) for k in ("rank", "noc", "gold", "silver", "bronze", "total")]
            )
        return out.getvalue().encode()
    unit_fields = ("code", "discipline", "name", "phase", "start_at", "venue", "status")
    writer.writerow([*unit_fields, "side", *_SIDE_FIELDS])
    for unit in document.rows:
        head = [_cell(unit[k]) for k in unit_fields]
        if not unit["sides"]:
            writer.writerow([*head, "", *("" for _ in _SIDE_FIELDS)])
        for side in unit["sides"]:
            writer.writerow(
                [*head, _cell(side["order"]), *(_cell(side.get(k)) for k in _SIDE_FIELDS)]
            )
    return out.getvalue().encode()


def _cell(value: object) -> str:
    """A CSV cell: a text a spreadsheet would run as a formula gets a leading ' (OWASP)."""
    text = "" if value is None else str(value)
    if text.startswith(_FORMULA_START) and not _SIGNED_NUMBER.fullmatch(text):
        text = "'" + text
    # The writer quotes a cell holding its line end (\n) but not a bare \r, which readers take
    # as the end of the row: every line break becomes \n, inside quotes.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def xml_text(value: object) -> str:
    """A value as XML 1.0 may hold it: characters it does not allow are dropped."""
    return _NOT_XML.sub("", str(value))


def _attrs(element: ET.Element, values: Iterable[tuple[str, object]]) -> None:
    for name, value in values:
        if value is not None and value != "":
            element.set(name, xml_text(value))


def _odf(document: Document, version: int, now: datetime) -> bytes:
    """ODF-style XML: an OdfBody with its DocumentType and a Version that only goes up."""
    root = ET.Element("OdfBody")
    _attrs(
        root,
        [
            ("CompetitionCode", document.competition),
            ("DocumentCode", document.document_code),
            ("DocumentType", document.document_type),
            ("DocumentSubtype", document.subtype),
            ("Version", version),
            ("FeedFlag", "P"),
            ("Date", now.date().isoformat()),
            ("Time", now.strftime("%H%M%S") + f"{now.microsecond // 1000:03d}"),
            ("Source", "OMNIUM"),
        ],
    )
    competition = ET.SubElement(root, "Competition")
    if document.kind == "medals":
        standings = ET.SubElement(competition, "MedalStandings")
        for row in document.rows:
            line = ET.SubElement(standings, "MedalLine")
            _attrs(line, [("Rank", row["rank"]), ("Organisation", row["noc"])])
            number = ET.SubElement(line, "MedalNumber")
            _attrs(
                number,
                [
                    ("Gold", row["gold"]),
                    ("Silver", row["silver"]),
                    ("Bronze", row["bronze"]),
                    ("Total", row["total"]),
                ],
            )
    else:
        for unit in document.rows:
            _odf_unit(competition, unit, results=document.kind == "results")
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="UTF-8", xml_declaration=True)
    return xml + b"\n"


def _odf_unit(parent: ET.Element, unit: Mapping[str, Any], *, results: bool) -> None:
    element = ET.SubElement(parent, "Unit")
    _attrs(
        element,
        [
            ("Code", unit["code"]),
            ("PhaseType", unit["phase"]),
            ("ScheduleStatus", unit["status"]),
            ("StartDate", unit["start_at"]),
            ("Venue", unit["venue"]),
        ],
    )
    ET.SubElement(element, "ItemName", Value=xml_text(unit["name"]))
    holder = ET.SubElement(element, "Results" if results else "StartList")
    for side in unit["sides"]:
        entry = ET.SubElement(holder, "Result" if results else "Start")
        _attrs(entry, [("SortOrder", side["order"]), ("StartOrder", side["order"])])
        if results:
            _attrs(
                entry,
                [
                    ("Result", side["score"] if side["score"] is not None else side["result"]),
                    ("Rank", side["rank"]),
                    ("Medal", side["medal"]),
                ],
            )
        who = ET.SubElement(entry, "Competitor")
        _attrs(who, [("Code", side["competitor"]), ("Organisation", side["noc"])])
        if side["name"]:
            ET.SubElement(who, "Description", Name=xml_text(side["name"]))


def medal_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("rank", "noc", "gold", "silver", "bronze", "total")}


def competitor_ids(units: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(
        {
            str(s["competitor_id"])
            for u in units
            for s in u.get("sides") or ()
            if s.get("competitor_id")
        }
    )


_BIG_DOCUMENT = 200  # rows; hashing and rendering more than this goes to a thread


async def off_loop(document: Document, work: Callable[..., T], *args: object) -> T:
    """Hashing and rendering a big Games is CPU work: off the loop, so live pushes and other
    clients' sends keep moving meanwhile. Small documents are quicker done in place."""
    if len(document.rows) > _BIG_DOCUMENT:
        return await asyncio.to_thread(work, *args)
    return work(*args)
