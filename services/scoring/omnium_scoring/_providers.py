"""Provider feeds (D5): registered by settings files, raw messages kept, turned into actions."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from google.protobuf import json_format, struct_pb2

from omnium.scoring.v1 import scoring_pb2
from omnium_grpc import source_actor
from omnium_scoring._scorer import Scorer
from omnium_scoring._sql import QUERIES
from omnium_settings import Settings

log = logging.getLogger(__name__)
Outcome = scoring_pb2.Outcome
PROVIDERS_DIR = Path(__file__).resolve().parents[3] / "providers"
_CODE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,39}$")
DOCUMENT_TYPES = ("DT_PLAY_BY_PLAY",)


class ProviderFileError(ValueError):
    """A provider settings file cannot be used; the message names the file and the key."""


class MessageRefused(ValueError):
    """A provider message that cannot be used; kept raw, and this says why."""


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    code: str
    name: str
    mode: str  # push or pull
    event_code: str
    format: str = "odf"
    address: str | None = None
    login: str | None = None
    secret: str | None = None
    api_key_hash: bytes | None = None
    interval_seconds: float = 5.0
    enabled: bool = True
    # The provider's action codes -> the sport file's actions; fields from attributes.
    actions: Mapping[str, str] = field(default_factory=dict)


def load_provider_file(path: Path) -> ProviderSpec:
    def fail(key: str, message: str) -> ProviderFileError:
        return ProviderFileError(f"{path}: {key}: {message}")

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProviderFileError(f"{path}: not valid TOML: {exc}") from None
    code = data.get("code")
    if not isinstance(code, str) or not _CODE.match(code) or code != path.stem:
        raise fail("code", f"give the provider a code (a-z, 0-9, - _) matching {path.name}")
    mode = data.get("mode")
    if mode not in ("push", "pull"):
        raise fail("mode", "is push (the provider POSTs to us) or pull (we read it)")
    if data.get("format", "odf") != "odf":
        raise fail("format", "the format omnium reads is odf (ODF-style XML)")
    event = data.get("event")
    if not isinstance(event, str) or not event:
        raise fail("event", "name the Games the provider's messages are for, e.g. AG2026")
    key = data.get("api_key")
    key_hash = data.get("api_key_sha256")
    digest = None
    if key_hash:
        digest = bytes.fromhex(key_hash)
    elif key:
        digest = hashlib.sha256(str(key).encode()).digest()
    if mode == "push" and not (key or key_hash):
        raise fail("api_key", "a push provider needs api_key (or api_key_sha256)")
    if mode == "pull" and not data.get("address"):
        raise fail("address", "a pull provider needs the address omnium reads")
    interval = data.get("interval_seconds", 5.0)
    if not isinstance(interval, (int, float)) or interval <= 0:
        raise fail("interval_seconds", "is how often a pull provider is read, in seconds")
    actions = data.get("actions", {})
    if not isinstance(actions, Mapping) or not all(isinstance(v, str) for v in actions.values()):
        raise fail("actions", 'maps the provider\'s action codes to ours: GOAL = "goal"')
    return ProviderSpec(
        code=code,
        name=str(data.get("name", code)),
        mode=mode,
        event_code=event,
        address=data.get("address"),
        login=data.get("login"),
        secret=data.get("password"),
        api_key_hash=digest,
        interval_seconds=float(interval),
        enabled=bool(data.get("enabled", True)),
        actions=dict(actions),
    )


def load_provider_folder(folder: Path) -> list[ProviderSpec]:
    """Every providers/<code>.toml; one bad file stops the start, named."""
    if not folder.is_dir():
        return []
    return [load_provider_file(path) for path in sorted(folder.glob("*.toml"))]


@dataclass(slots=True)
class OdfAction:
    """One action read from a message, before it is checked against the sport's rules."""

    client_id: str
    kind: str
    side: int
    fields: dict[str, Any]


def parse_odf(
    body: bytes, spec: ProviderSpec, sides_by_noc: Mapping[str, int] | None = None
) -> tuple[str, list[OdfAction]]:
    """The unit code and the actions of an ODF-style DT_PLAY_BY_PLAY message."""
    # Provider XML never needs a DTD; refusing one closes entity-expansion attacks without
    # another dependency (defusedxml does the same, and more, for documents that need DTDs).
    head = body[:4096].upper()
    if b"<!DOCTYPE" in head or b"<!ENTITY" in body.upper():
        raise MessageRefused("the message has a DOCTYPE or ENTITY; ODF messages carry neither")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise MessageRefused(f"the message is not well-formed XML ({exc})") from None
    if root.tag != "OdfBody":
        raise MessageRefused(f"the root element is <{root.tag}>, not <OdfBody>")
    doc_type = root.get("DocumentType", "")
    if doc_type not in DOCUMENT_TYPES:
        raise MessageRefused(
            f"DocumentType {doc_type!r} is not read here; omnium reads {', '.join(DOCUMENT_TYPES)}"
        )
    competition = root.get("CompetitionCode", "")
    if competition != spec.event_code:
        raise MessageRefused(
            f"CompetitionCode {competition!r} is not {spec.event_code}, the Games this "
            "provider is registered for"
        )
    unit_code = root.get("DocumentCode", "")
    if not re.match(r"^[A-Z0-9-]{34}$", unit_code):
        raise MessageRefused(f"DocumentCode {unit_code!r} is not a 34-character unit code")
    actions: list[OdfAction] = []
    for element in root.iter("Action"):
        actions.append(_odf_action(element, spec, unit_code, sides_by_noc))
    if not actions:
        raise MessageRefused("the message has no <Action> elements")
    return unit_code, actions


def _odf_action(
    element: ET.Element, spec: ProviderSpec, unit_code: str, sides_by_noc: Mapping[str, int] | None
) -> OdfAction:
    """One <Action>: its id, its mapped kind, the side it is for and its fields."""
    ident = element.get("Id", "")
    if not ident:
        raise MessageRefused("an <Action> has no Id; every action needs one")
    code = element.get("Action", "")
    kind = spec.actions.get(code)
    if kind is None:
        raise MessageRefused(
            f"Action {code!r} (Id {ident}) is not mapped: add it to the provider's "
            f"[actions] in providers/{spec.code}.toml"
        )
    side = 0
    fields: dict[str, Any] = {}
    competitor = element.find("Competitor")
    if competitor is not None:
        order = competitor.get("Order")
        noc = competitor.get("Code", "")
        if order and order.isdigit():
            side = int(order)
        elif sides_by_noc and noc in sides_by_noc:
            side = sides_by_noc[noc]
        else:
            raise MessageRefused(f"Action Id {ident}: the competitor has no Order")
        for athlete in competitor.iter("Athlete"):
            bib = athlete.get("Bib") or athlete.get("Code") or ""
            role = athlete.get("Role", "")
            fields["player_in" if role == "IN" else "player"] = bib
    if element.get("Minute"):
        fields["minute"] = element.get("Minute")
    for extra in element.iter("Field"):
        name = extra.get("Name", "")
        if name:
            fields[name] = extra.get("Value", "")
    return OdfAction(f"provider:{spec.code}:{unit_code}:{ident}", kind, side, fields)


class Providers:
    """Registers providers from their files, receives pushed messages, pulls the others."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool, scorer: Scorer) -> None:
        self.settings = settings
        self.pool = pool
        self.scorer = scorer
        self.specs: dict[str, ProviderSpec] = {}

    async def register(self, spec: ProviderSpec) -> None:
        async with self.pool.acquire() as conn:
            save = QUERIES.statement("save_provider")
            await conn.execute(
                save.text,
                *save.args(
                    {
                        "code": spec.code,
                        "name": spec.name,
                        "format": spec.format,
                        "mode": spec.mode,
                        "address": spec.address,
                        "login": spec.login,
                        "secret": spec.secret,
                        "api_key_hash": spec.api_key_hash,
                        "interval_seconds": spec.interval_seconds,
                        "event_code": spec.event_code,
                        "enabled": spec.enabled,
                    }
                ),
            )
        self.specs[spec.code] = spec

    async def register_folder(self, folder: Path) -> list[str]:
        for spec in load_provider_folder(folder):
            await self.register(spec)
        return sorted(self.specs)

    async def receive(
        self, code: str, api_key: str | None, content_type: str, body: bytes
    ) -> scoring_pb2.ProviderAnswer:
        """Keep the message as received, then turn it into actions. api_key None: pulled."""
        spec = self.specs.get(code)
        if spec is None or not spec.enabled:
            return scoring_pb2.ProviderAnswer(
                outcome="refused", reason=f"there is no provider {code!r} taking messages"
            )
        if api_key is not None:
            sent = hashlib.sha256(api_key.encode()).digest()
            if spec.api_key_hash is None or not hmac.compare_digest(sent, spec.api_key_hash):
                return scoring_pb2.ProviderAnswer(
                    outcome="refused", reason="the API key is not this provider's"
                )
        if len(body) > self.settings.scoring.provider_max_bytes:
            return scoring_pb2.ProviderAnswer(
                outcome="refused",
                reason=f"the message is {len(body)} bytes; at most "
                f"{self.settings.scoring.provider_max_bytes} are taken",
            )
        async with self.pool.acquire() as conn:
            message_id = await conn.fetchval(QUERIES["keep_message"], code, content_type, body)
        outcome, reason, unit_id, count = await self._apply(spec, body, message_id)
        async with self.pool.acquire() as conn:
            await conn.execute(
                QUERIES["message_outcome"], message_id, outcome, reason, unit_id, count
            )
        return scoring_pb2.ProviderAnswer(
            outcome=outcome, reason=reason or "", message_id=message_id, actions=count
        )

    async def _apply(
        self, spec: ProviderSpec, body: bytes, message_id: int
    ) -> tuple[str, str | None, str | None, int]:
        try:
            unit_code, actions = parse_odf(body, spec)
        except MessageRefused as exc:
            return "refused", str(exc), None, 0
        async with self.pool.acquire() as conn:
            unit = await conn.fetchrow(QUERIES["unit_by_code"], spec.event_code, unit_code)
        if unit is None:
            return "refused", f"there is no unit {unit_code} in {spec.event_code}", None, 0
        unit_id: str = unit["id"]
        sport = self.scorer.sport_of(unit["discipline"], unit["sport_file"])
        actor = source_actor("provider", spec.code, f"provider:{spec.format}:{spec.mode}")
        saved = duplicates = 0
        for action in actions:
            rule = sport.actions.get(action.kind) if sport is not None else None
            if rule is not None:
                # A provider sends what it knows (a minute on every action); keep what ours takes.
                action.fields = {k: v for k, v in action.fields.items() if k in rule.fields}
            fields = struct_pb2.Struct()
            json_format.ParseDict(action.fields, fields)
            answer = await self.scorer.act(
                scoring_pb2.Action(
                    client_id=action.client_id,
                    unit_id=unit_id,
                    kind=action.kind,
                    side=action.side,
                    fields=fields,
                ),
                actor,
            )
            if answer.outcome == Outcome.OUTCOME_SAVED:
                saved += 1
            elif answer.outcome == Outcome.OUTCOME_DUPLICATE:
                duplicates += 1
            else:
                ident = action.client_id.rsplit(":", 1)[-1]
                reason = (
                    f"Action Id {ident} ({action.kind}): {answer.reason}; "
                    f"{saved} new action(s) before it were saved"
                )
                return "refused", reason, unit_id, saved
        if saved == 0 and duplicates:
            return "duplicate", "every action in it was saved before", unit_id, 0
        return "accepted", None, unit_id, saved

    async def pull_once(self, code: str, http: httpx.AsyncClient) -> scoring_pb2.ProviderAnswer:
        spec = self.specs[code]
        auth = (spec.login, spec.secret or "") if spec.login else None
        response = await http.get(spec.address or "", auth=auth)
        async with self.pool.acquire() as conn:
            await conn.execute(QUERIES["pulled"], code)
        if response.status_code != 200:
            return scoring_pb2.ProviderAnswer(
                outcome="refused",
                reason=f"{spec.address} answered {response.status_code}; nothing was read",
            )
        return await self.receive(
            code, None, response.headers.get("content-type", ""), response.content
        )

    async def pull_forever(self) -> None:
        """Read each pull provider at its interval. Runs in its own, lower-priority process."""
        pulled = [s for s in self.specs.values() if s.mode == "pull" and s.enabled]
        if not pulled:
            log.info("no pull providers registered")
        async with httpx.AsyncClient(timeout=self.settings.grpc.deadline_seconds) as http:
            await asyncio.gather(*(self._pull_loop(spec, http) for spec in pulled))

    async def _pull_loop(self, spec: ProviderSpec, http: httpx.AsyncClient) -> None:
        while True:
            try:
                answer = await self.pull_once(spec.code, http)
                if answer.outcome == "refused":
                    log.warning("provider %s: %s", spec.code, answer.reason)
            except httpx.HTTPError as exc:
                log.warning("provider %s: could not read %s (%s)", spec.code, spec.address, exc)
            await asyncio.sleep(spec.interval_seconds)
