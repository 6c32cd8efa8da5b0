"""What a command asks of the records, before any database is read: intents, pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from omnium.common.v1 import actor_pb2
from omnium_command._rows import Match
from omnium_grpc import ACTOR_KIND_NAMES

# Commands from these senders pin the fields they set; everyone else leaves pinned fields alone.
PINNING_KINDS = frozenset({actor_pb2.Actor.KIND_PERSON, actor_pb2.Actor.KIND_SCORER})


@dataclass(frozen=True, slots=True)
class RowRef:
    """The import row an intent came from."""

    position: int
    key: str
    hash: bytes


@dataclass(slots=True)
class Intent:
    """One record a command wants to change: which, which fields, which pins to drop."""

    kind: str  # "unit", "competitor" or "medal_row"
    ref_id: str | None = None
    # A unit's or competitor's code, or "<discipline code or empty>:<NOC>" for a medal row.
    ref_code: str | None = None
    fields: dict[str, object] = field(default_factory=dict)
    # Sides of a unit by their order: the fields to set on each.
    sides: dict[int, dict[str, object]] = field(default_factory=dict)
    # Unit fields, or "sides[N].field", to unpin.
    unpin: frozenset[str] = frozenset()
    row: RowRef | None = None
    # Only for a unit an import batch may create: its ODF discipline code.
    discipline_code: str | None = None
    # results.approve: record the unit's results as a person approved them (the checker step).
    approve: bool = False
    # medals.withdraw_row: the row must exist; a withdrawal never creates one.
    withdraw: bool = False
    # Only for scoring.act: the match action to record and the match state it leads to.
    match: Match | None = None

    def referenced_competitors(self) -> set[str]:
        return {
            competitor
            for side in self.sides.values()
            if isinstance(competitor := side.get("competitor_id"), str) and competitor
        }


@dataclass(frozen=True, slots=True)
class BatchContext:
    integration_code: str
    run_id: str
    batch_no: int
    create_units: bool = False
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class ReadKeys:
    """What the road's read asks PostgreSQL for: the records a command names, and its context."""

    command_id: str
    unit_ids: tuple[str, ...] = ()
    unit_codes: tuple[str, ...] = ()
    event_code: str | None = None
    competitor_ids: tuple[str, ...] = ()
    competitor_codes: tuple[str, ...] = ()
    medal_refs: tuple[str, ...] = ()
    referenced_competitors: tuple[str, ...] = ()
    integration_code: str | None = None
    run_id: str | None = None
    disciplines: bool = False

    def parts(self) -> list[str]:
        """The parts of the read these keys need (the rest read as NULL)."""
        return [
            name
            for name, needed in (
                ("units", self.unit_ids or self.unit_codes),
                ("competitors", self.competitor_ids or self.competitor_codes),
                ("medal_rows", self.medal_refs),
                ("known_competitors", self.referenced_competitors),
                # Asked by import batches only: an import's medal row naming a NOC we do not
                # know is held; a person's command is theirs to make.
                ("known_nocs", bool(self.medal_refs) and self.integration_code is not None),
                ("disciplines", self.disciplines),
                ("batch", self.integration_code is not None),
            )
            if needed
        ]

    def args(self) -> dict[str, object]:
        """The whole read's arguments, by name (QUERIES.compose picks those it takes); the
        disciplines part needs no argument, only to be asked for (`parts`)."""
        return {
            "command_id": self.command_id,
            "unit_ids": list(self.unit_ids),
            "unit_codes": list(self.unit_codes),
            "event_code": self.event_code,
            "competitor_ids": list(self.competitor_ids),
            "competitor_codes": list(self.competitor_codes),
            "medal_refs": list(self.medal_refs),
            "referenced_competitors": list(self.referenced_competitors),
            "integration_code": self.integration_code,
            "run_id": self.run_id,
        }


@dataclass(slots=True)
class Request:
    """A command made ready for the road: validated, with the intents it carries."""

    command_id: str
    code: str
    actor: actor_pb2.Actor
    event_code: str
    intents: list[Intent]
    payload: dict[str, object]
    subject_kind: str
    request_hash: bytes | None = None
    batch: BatchContext | None = None
    # Batch rows refused before the road: position -> (key, hash, reason).
    refused_rows: dict[int, tuple[str, bytes, str]] = field(default_factory=dict)

    @property
    def pins(self) -> bool:
        return self.actor.kind in PINNING_KINDS

    @property
    def actor_kind(self) -> str:
        return ACTOR_KIND_NAMES.get(self.actor.kind, "system")

    def read_keys(self) -> ReadKeys:
        refs: dict[str, tuple[list[str], list[str]]] = {
            kind: ([], []) for kind in ("unit", "competitor", "medal_row")
        }
        for intent in self.intents:
            ids, codes = refs[intent.kind]
            if intent.ref_id:
                ids.append(intent.ref_id)
            elif intent.ref_code:
                codes.append(intent.ref_code)
        batch = self.batch
        return ReadKeys(
            command_id=self.command_id,
            unit_ids=tuple(refs["unit"][0]),
            unit_codes=tuple(refs["unit"][1]),
            event_code=self.event_code or None,
            competitor_ids=tuple(refs["competitor"][0]),
            competitor_codes=tuple(refs["competitor"][1]),
            medal_refs=tuple(refs["medal_row"][1]),
            referenced_competitors=tuple(
                sorted({c for intent in self.intents for c in intent.referenced_competitors()})
            ),
            integration_code=batch.integration_code if batch else None,
            run_id=batch.run_id if batch else None,
            disciplines=any(i.kind == "medal_row" for i in self.intents)
            or bool(batch and batch.create_units),
        )
