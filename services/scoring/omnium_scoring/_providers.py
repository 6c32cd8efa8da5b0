"""Provider feeds (D5): registered by settings files, raw messages kept, turned into actions."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

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
_UNIT_CODE = re.compile(r"[A-Z0-9-]{34}")
# An action's Id becomes part of its client id (command_id): short and plain.
_ACTION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_ORDER = re.compile(r"[0-9]{1,3}")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
DOCUMENT_TYPES = ("DT_PLAY_BY_PLAY",)
# The same answer for an unknown provider and a wrong key, so a stranger cannot list providers.
WRONG_KEY = (
    "this is not the key of a provider here: check the provider code in the address and the "
    "key in the X-Api-Key header"
)


class ProviderFileError(ValueError):
    """A provider settings file cannot be used; the message names the file and the key."""


# (key, message) -> the error naming the file and the key.
_Fail = Callable[[str, str], ProviderFileError]


class MessageRefused(ValueError):
    """A provider message that cannot be used; kept raw, and this says why."""


class MessageUnreadable(MessageRefused):
    """A message that is not an ODF message omnium reads (not XML, a DTD, another document)."""


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    code: str
    name: str
    mode: str  # push or pull
    event_code: str
    format: str = "odf"
    address: str | None = None
    login: str | None = None
    # Dev only: a password written in the file (production refuses it; see password_file).
    secret: str | None = None
    # A mounted secret holding the pull provider's password, read at each pull so a rotated
    # secret counts without a restart.
    password_file: Path | None = None
    api_key_hash: bytes | None = None
    interval_seconds: float = 5.0
    enabled: bool = True
    # The provider's action codes -> the sport file's actions; fields from attributes.
    actions: Mapping[str, str] = field(default_factory=dict)


def load_provider_file(path: Path, *, production: bool = False) -> ProviderSpec:
    """One provider file. `production`: a key or password written in the file is refused
    (the deploy checks say the same before any process starts)."""

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
    digest = _key_digest(data, str(mode), production, fail)
    if mode == "pull" and not data.get("address"):
        raise fail("address", "a pull provider needs the address omnium reads")
    password, password_file = _password(path, data, production, fail)
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
        secret=password,
        password_file=password_file,
        api_key_hash=digest,
        interval_seconds=float(interval),
        enabled=bool(data.get("enabled", True)),
        actions=dict(actions),
    )


def _key_digest(
    data: Mapping[str, Any],
    mode: str,
    production: bool,
    fail: _Fail,
) -> bytes | None:
    """The sha256 of the push key: api_key_sha256, or (development only) of api_key."""
    key = data.get("api_key")
    key_hash = data.get("api_key_sha256")
    if key is not None and key_hash is not None:
        raise fail("api_key", "give api_key_sha256 alone (api_key is for the dev stack only)")
    if key_hash is not None:
        if not isinstance(key_hash, str) or not _SHA256_HEX.fullmatch(key_hash):
            raise fail(
                "api_key_sha256",
                'is the key\'s sha256 in 64 hex digits: printf %s "$KEY" | sha256sum',
            )
        return bytes.fromhex(key_hash)
    if key is not None:
        if production:
            raise fail(
                "api_key",
                "is written in the file, which production refuses: write its hash instead, "
                'api_key_sha256 = "<hex>" (printf %s "$KEY" | sha256sum)',
            )
        if not isinstance(key, str) or not key:
            raise fail("api_key", "is the key the provider sends in X-Api-Key, as a string")
        return hashlib.sha256(key.encode()).digest()
    if mode == "push":
        raise fail("api_key_sha256", "a push provider needs the sha256 of its key")
    return None


def _password(
    path: Path, data: Mapping[str, Any], production: bool, fail: _Fail
) -> tuple[str | None, Path | None]:
    """A pull provider's password: a mounted file (password_file), or in development only a
    password written in the provider file."""
    password = data.get("password")
    named = data.get("password_file")
    if password is not None and named is not None:
        raise fail("password", "give password_file alone (password is for the dev stack only)")
    if password is not None:
        if production:
            raise fail(
                "password",
                "is written in the file, which production refuses: mount it from your secret "
                "store and name that file with password_file",
            )
        return str(password), None
    if named is None:
        return None, None
    if not isinstance(named, str) or not named:
        raise fail("password_file", "is the path of a file holding the password")
    # A relative path is read beside the provider file, as a mounted secret usually sits.
    secret_path = (path.parent / named).resolve()
    try:
        read_password(secret_path)
    except OSError as exc:
        raise fail(
            "password_file",
            f"cannot be read ({exc.strerror or exc}): mount the secret at {secret_path} or "
            "name the file it is in",
        ) from None
    return None, secret_path


def read_password(path: Path) -> str:
    """A password file's text without its line ending, as `echo` and secret stores write it."""
    return path.read_text(encoding="utf-8").rstrip("\r\n")


def load_provider_folder(folder: Path, *, production: bool = False) -> list[ProviderSpec]:
    """Every providers/<code>.toml; one bad file stops the start, named."""
    if not folder.is_dir():
        return []
    return [
        load_provider_file(path, production=production) for path in sorted(folder.glob("*.toml"))
    ]


@dataclass(slots=True)
class OdfAction:
    """One action read from a message, before it is checked against the sport's rules."""

    client_id: str
    kind: str
    side: int
    fields: dict[str, Any]


def _no_dtd(*_: object) -> None:
    raise MessageUnreadable(
        "the message has a DOCTYPE (a DTD); ODF messages carry none and omnium reads none: "
        "send the OdfBody alone"
    )


def read_xml(body: bytes) -> ET.Element:
    """The message as an element tree, read by expat with any DTD refused.

    The refusal is expat's own doctype event, so it holds whatever the encoding (a UTF-16
    document hides `<!DOCTYPE` from any look at the raw bytes) and no entity is ever declared,
    let alone expanded. Without a DTD expat knows only the five predefined entities.
    """
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = _no_dtd
    parser.EntityDeclHandler = _no_dtd
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.buffer_text = True
    try:
        parser.Parse(body, True)
    except MessageRefused:
        raise  # the doctype handler's own refusal (a ValueError too)
    except expat.ExpatError as exc:
        raise MessageUnreadable(f"the message is not well-formed XML ({exc})") from None
    except (ValueError, LookupError) as exc:
        # pyexpat's answer to a declared encoding it cannot decode byte by byte (Shift_JIS...).
        raise MessageUnreadable(
            f"the message's encoding cannot be read ({exc}); send it as UTF-8 or UTF-16"
        ) from None
    root: ET.Element = builder.close()
    return root


def parse_odf(
    body: bytes,
    spec: ProviderSpec,
    sides_by_noc: Mapping[str, int] | None = None,
    *,
    max_actions: int | None = None,
) -> tuple[str, list[OdfAction]]:
    """The unit code and the actions of an ODF-style DT_PLAY_BY_PLAY message."""
    root = read_xml(body)
    if root.tag != "OdfBody":
        raise MessageUnreadable(f"the root element is <{root.tag}>, not <OdfBody>")
    doc_type = root.get("DocumentType", "")
    if doc_type not in DOCUMENT_TYPES:
        raise MessageUnreadable(
            f"DocumentType {doc_type!r} is not read here; omnium reads {', '.join(DOCUMENT_TYPES)}"
        )
    competition = root.get("CompetitionCode", "")
    if competition != spec.event_code:
        raise MessageUnreadable(
            f"CompetitionCode {competition!r} is not {spec.event_code}, the Games this "
            "provider is registered for"
        )
    unit_code = root.get("DocumentCode", "")
    if not _UNIT_CODE.fullmatch(unit_code):
        raise MessageUnreadable(f"DocumentCode {unit_code!r} is not a 34-character unit code")
    elements = list(root.iter("Action"))
    if not elements:
        raise MessageUnreadable("the message has no <Action> elements")
    if max_actions is not None and len(elements) > max_actions:
        raise MessageUnreadable(
            f"the message has {len(elements)} <Action> elements; at most {max_actions} are "
            "read from one message: send the rest in another"
        )
    actions = [_odf_action(element, spec, unit_code, sides_by_noc) for element in elements]
    return unit_code, actions


def _odf_action(
    element: ET.Element, spec: ProviderSpec, unit_code: str, sides_by_noc: Mapping[str, int] | None
) -> OdfAction:
    """One <Action>: its id, its mapped kind, the side it is for and its fields."""
    ident = element.get("Id", "")
    if not _ACTION_ID.fullmatch(ident):
        raise MessageUnreadable(
            f"an <Action> has the Id {ident[:80]!r}; every action needs an Id of 1 to 64 "
            "letters, digits or . _ : -"
        )
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
        if order and _ORDER.fullmatch(order):
            side = int(order)
        elif order:
            raise MessageUnreadable(
                f"Action Id {ident}: the competitor's Order {order[:20]!r} is not a side "
                "number (1, 2, ...)"
            )
        elif sides_by_noc and noc in sides_by_noc:
            side = sides_by_noc[noc]
        else:
            raise MessageUnreadable(
                f"Action Id {ident}: the competitor has no Order (its side, 1, 2, ...)"
            )
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
                        # Passwords stay in their files (and the dev stack's in memory).
                        "secret": None,
                        "api_key_hash": spec.api_key_hash,
                        "interval_seconds": spec.interval_seconds,
                        "event_code": spec.event_code,
                        "enabled": spec.enabled,
                    }
                ),
            )
        self.specs[spec.code] = spec

    async def register_folder(self, folder: Path) -> list[str]:
        production = self.settings.server.environment == "production"
        for spec in load_provider_folder(folder, production=production):
            await self.register(spec)
        return sorted(self.specs)

    async def receive(
        self, code: str, api_key: str | None, content_type: str, body: bytes
    ) -> scoring_pb2.ProviderAnswer:
        """Keep the message as received, then turn it into actions. api_key None: pulled."""
        spec = self.specs.get(code)
        if spec is None or not spec.enabled:
            log.info("provider push to %r refused: no such provider taking messages", code)
            return _refused("key", WRONG_KEY)
        if api_key is not None:
            sent = hashlib.sha256(api_key.encode("utf-8", "surrogateescape")).digest()
            if spec.api_key_hash is None or not hmac.compare_digest(sent, spec.api_key_hash):
                log.info("provider push to %s refused: not its key", code)
                return _refused("key", WRONG_KEY)
        scoring = self.settings.scoring
        if len(body) > scoring.provider_max_bytes:
            return _refused(
                "too_large",
                f"the message is {len(body)} bytes; at most {scoring.provider_max_bytes} are "
                "taken (OMNIUM_PROVIDER_MAX_BYTES): send it in smaller parts",
            )
        async with self.pool.acquire() as conn, conn.transaction():
            # Counted and kept in one transaction: a message is in the day's count exactly
            # when it is kept.
            count = QUERIES.statement("count_kept_bytes")
            counted = await conn.fetchval(
                count.text,
                *count.args(
                    {
                        "code": code,
                        "bytes": len(body),
                        "day_max_bytes": scoring.provider_day_max_bytes,
                    }
                ),
            )
            if counted is None:
                wait = await conn.fetchval(QUERIES["seconds_to_midnight"])
                return _refused(
                    "quota",
                    f"{spec.code} has sent the {scoring.provider_day_max_bytes} bytes a day "
                    "omnium keeps for one provider (OMNIUM_PROVIDER_DAY_MAX_BYTES); nothing "
                    "from this message was kept. Send it again after midnight UTC, or ask the "
                    "operators to raise the bound.",
                    retry_after=int(wait),
                )
            message_id = await conn.fetchval(
                *QUERIES.bind(
                    "keep_message", provider_code=code, content_type=content_type, body=body
                )
            )
        outcome, refused_for, reason, unit_id, count_saved = await self._apply(
            spec, body, message_id
        )
        async with self.pool.acquire() as conn:
            await conn.execute(
                *QUERIES.bind(
                    "message_outcome",
                    id=message_id,
                    outcome=outcome,
                    reason=reason,
                    unit_id=unit_id,
                    actions=count_saved,
                )
            )
        return scoring_pb2.ProviderAnswer(
            outcome=outcome,
            reason=reason or "",
            message_id=message_id,
            actions=count_saved,
            refused_for=refused_for,
        )

    async def _apply(
        self, spec: ProviderSpec, body: bytes, message_id: int
    ) -> tuple[str, str, str | None, str | None, int]:
        """(outcome, refused_for, reason, unit id, actions saved) of a kept message."""
        try:
            unit_code, actions = parse_odf(
                body, spec, max_actions=self.settings.scoring.provider_max_actions
            )
        except MessageUnreadable as exc:
            return "refused", "unreadable", str(exc), None, 0
        except MessageRefused as exc:
            return "refused", "rules", str(exc), None, 0
        async with self.pool.acquire() as conn:
            unit = await conn.fetchrow(QUERIES["unit_by_code"], spec.event_code, unit_code)
        if unit is None:
            return "refused", "rules", f"there is no unit {unit_code} in {spec.event_code}", None, 0
        unit_id: str = unit["id"]
        sport = self.scorer.reads.sport_of(unit["discipline"], unit["sport_file"])
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
                return "refused", "rules", reason, unit_id, saved
        if saved == 0 and duplicates:
            return "duplicate", "", "every action in it was saved before", unit_id, 0
        return "accepted", "", None, unit_id, saved

    async def pull_once(self, code: str, http: httpx.AsyncClient) -> scoring_pb2.ProviderAnswer:
        spec = self.specs[code]
        auth = None
        if spec.login:
            try:
                password = read_password(spec.password_file) if spec.password_file else spec.secret
            except OSError as exc:
                return _refused(
                    "key",
                    f"the password file {spec.password_file} cannot be read "
                    f"({exc.strerror or exc}); nothing was read from {spec.address}",
                )
            auth = (spec.login, password or "")
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


def _refused(refused_for: str, reason: str, *, retry_after: int = 0) -> scoring_pb2.ProviderAnswer:
    """A message refused before it was kept."""
    return scoring_pb2.ProviderAnswer(
        outcome="refused",
        reason=reason,
        refused_for=refused_for,
        retry_after_seconds=retry_after,
    )
