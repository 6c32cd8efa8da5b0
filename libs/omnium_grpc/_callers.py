"""Who may call what: every bearer token belongs to a named caller, and each caller has a role.

A role says which methods its callers may call and whom their commands may name as the sender.
A caller whose role may not name a sender (another team's feed, say) is recorded as itself,
whatever its command's actor says. The roles are what omnium's own processes really call, read
from protos/ (see docs/callers.md for the table).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Protocol, TypeAlias

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium.imports.v1 import imports_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_settings import Settings, SettingsError

Kind: TypeAlias = actor_pb2.Actor.Kind.ValueType
PERSON = actor_pb2.Actor.KIND_PERSON
SCORER = actor_pb2.Actor.KIND_SCORER
PROVIDER = actor_pb2.Actor.KIND_PROVIDER
SYSTEM = actor_pb2.Actor.KIND_SYSTEM
#: Senders that are people: their commands must say from which screen they came.
PEOPLE: frozenset[Kind] = frozenset({PERSON, SCORER})
_EVERY_KIND: frozenset[Kind] = frozenset(actor_pb2.Actor.Kind.values())


def _methods(module: object, service: str, *names: str) -> frozenset[str]:
    """Full method paths, checked against the contract: a misspelt name fails at import."""
    descriptor = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
    return frozenset(
        f"/{descriptor.full_name}/{descriptor.methods_by_name[name].name}" for name in names
    )


SUBMIT = next(iter(_methods(command_pb2, "CommandService", "Submit")))
APPLY_IMPORT_BATCH = next(iter(_methods(command_pb2, "CommandService", "ApplyImportBatch")))
_TIMELINE = _methods(command_pb2, "CommandService", "GetTimeline")
_IMPORTS_READS = _methods(
    imports_pb2, "ImportsService", "ListIntegrations", "ListRuns", "GetRun", "ListWaiting"
)
_IMPORTS_ACTIONS = _methods(
    imports_pb2,
    "ImportsService",
    "StartRun",
    "AddLookup",
    "ResolveMissing",
    "SetIntegrationState",
    "RunNow",
    "DryRun",
)
_MATCH_READS = _methods(scoring_pb2, "ScoringService", "GetMatchState", "WatchMatch", "ListMatches")
_SCORING_ACTS = _methods(scoring_pb2, "ScoringService", "Act", "Sync")
_PROVIDER_PUSH = _methods(scoring_pb2, "ScoringService", "ReceiveProviderMessage")
_DELIVERY_READS = _methods(delivery_pb2, "DeliveryService", "ListClients", "GetClient", "ListSends")
_SECRET_ROTATION = _methods(delivery_pb2, "DeliveryService", "RotateWebhookSecret")
_DELIVERY_ACTIONS = _methods(delivery_pb2, "DeliveryService", "Resend") | _SECRET_ROTATION
# Any caller with a known token may ask what the server offers.
_REFLECTION = frozenset(
    {
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    }
)
_READS = _TIMELINE | _IMPORTS_READS | _MATCH_READS | _DELIVERY_READS
# What a console does only for a signed-in person: every change it may make. (A dry run writes
# nothing; a resend sends again what was already approved and sent.)
_PEOPLE_S_ACTIONS = (
    (frozenset({SUBMIT}) | (_IMPORTS_ACTIONS - _methods(imports_pb2, "ImportsService", "DryRun")))
    | _SCORING_ACTS
    | _SECRET_ROTATION
)

#: Call metadata with the session token of the person a console acts for (its sign-in cookie).
SESSION_HEADER = "omnium-session"
#: Who a scorer console's call is recorded as when no one is signed in (sign-in off).
NOT_SIGNED_IN = "scorer (not signed in)"


@dataclass(frozen=True, slots=True)
class Person:
    """The signed-in person a console acts for, read from their session (never from the call)."""

    account_id: str
    login: str
    name: str
    #: The account's role: admin, operator, scorer or viewer.
    role: str


class SessionLookup(Protocol):
    """How a server finds the person behind a session token (omnium_accounts.CallSessions)."""

    async def __call__(self, token: str) -> Person | None: ...


@dataclass(frozen=True, slots=True)
class Role:
    """What the callers of one role may do."""

    name: str
    #: Who holds it, for the docs and the refusals.
    meant_for: str
    #: Full method paths ("/omnium.command.v1.CommandService/Submit"); None: every method.
    methods: frozenset[str] | None
    #: Actor kinds its commands may name as the sender; any other is recorded as the caller.
    names: frozenset[Kind]
    #: The kind the timeline shows when the caller stands for itself.
    own_kind: Kind = SYSTEM
    #: Command codes it may Submit; None: every code.
    codes: frozenset[str] | None = None
    #: Whether it reads results the checker holds before a person approves them:
    #: omnium's own processes and the consoles do; another team never does, by any read.
    sees_held: bool = True
    #: A console's: the account roles it acts for. It acts only with the person's session
    #: (SESSION_HEADER), and its commands name that person, whatever their actor says.
    people: frozenset[str] = frozenset()

    def may_call(self, method: str) -> bool:
        return self.methods is None or method in self.methods or method in _REFLECTION


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "service",
            "omnium's own back-end processes (imports, scoring) and the command lines beside "
            "them: they send their own integration and provider commands and relay the people "
            "a console signed in",
            methods=None,
            names=_EVERY_KIND,
        ),
        Role(
            "operator-console",
            "the operators' console (admin), acting for the signed-in person",
            methods=frozenset({SUBMIT})
            | _TIMELINE
            | _IMPORTS_READS
            | _IMPORTS_ACTIONS
            | _DELIVERY_READS
            | _DELIVERY_ACTIONS
            | _MATCH_READS,
            names=frozenset({PERSON}),
            people=frozenset({"operator", "admin"}),
        ),
        Role(
            "scorer-console",
            "the gateway's scorer console, acting for the signed-in scorer, and passing "
            "providers' pushes on (scoring checks each provider's own key)",
            methods=_SCORING_ACTS | _MATCH_READS | _PROVIDER_PUSH,
            names=frozenset({SCORER, PERSON}),
            people=frozenset({"scorer", "operator", "admin"}),
        ),
        Role(
            "provider",
            "another team's results feed: provider messages and results commands, always "
            "recorded as the feed itself",
            methods=frozenset({SUBMIT}) | _PROVIDER_PUSH | _MATCH_READS,
            names=frozenset(),
            own_kind=PROVIDER,
            codes=frozenset({"results.set_status", "results.set_sides", "medals.set_row"}),
            sees_held=False,
        ),
        Role(
            "reader",
            "another team that reads (a stats team): timelines, runs, match states, clients",
            methods=_READS,
            names=frozenset(),
            sees_held=False,
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Caller:
    """One named caller: the process or team behind a token."""

    name: str
    role: Role
    #: A console's: the person whose session the call carries (None: no one signed in).
    person: Person | None = None

    def for_person(self, person: Person) -> Caller:
        return replace(self, person=person)

    def person_refusal(self, method: str, *, anonymous_scorers: bool) -> str | None:
        """Why a console may not make this change now: no signed-in person is behind it (a
        scorer console may, when scorers need not sign in, as a scorer with no account)."""
        if not self.role.people or self.person is not None or method not in _PEOPLE_S_ACTIONS:
            return None
        if anonymous_scorers and SCORER in self.role.names and method in _SCORING_ACTS:
            return None
        return (
            f"caller {self.name!r} acts only for a signed-in person, and this call carries no "
            f"person's session ({SESSION_HEADER} metadata). Nothing was done: sign in on the "
            "console again and repeat it."
        )

    def acting(self, actor: actor_pb2.Actor) -> actor_pb2.Actor:
        """A console's actor as its session says: the signed-in person (their name, account and
        role), on the screen the call names; with no one signed in, no account at all."""
        if not self.role.people:
            return actor
        person = self.person
        if person is None:
            if SCORER in self.role.names:
                return actor_pb2.Actor(kind=SCORER, name=NOT_SIGNED_IN, screen=actor.screen)
            return self.recorded(actor_pb2.Actor(screen=actor.screen))
        # A scorer account acts as a scorer, so its matches' assignment always applies.
        if person.role == "scorer" and SCORER in self.role.names:
            kind = SCORER
        elif actor.kind in self.role.names:
            kind = actor.kind
        else:
            kind = PERSON if PERSON in self.role.names else SCORER
        return actor_pb2.Actor(
            kind=kind,
            name=person.name,
            source_code=f"account:{person.account_id}",
            screen=actor.screen,
        )

    def refusal(self, method: str) -> str | None:
        """None when the role may call the method, else why not, in plain words."""
        if self.role.may_call(method):
            return None
        service, _, name = method.strip("/").rpartition("/")
        if self.role.name == "reader":
            return (
                f"caller {self.name!r} has the role 'reader', which may only read; it may not "
                f"call {name} of {service}. Ask for a caller with a role that may write."
            )
        return (
            f"caller {self.name!r} has the role {self.role.name!r}, which may not call {name} "
            f"of {service}. Ask for a caller with a role that may (docs/callers.md)."
        )

    def code_refusal(self, code: str) -> str | None:
        """None when the role may Submit this command code, else why not."""
        codes = self.role.codes
        if codes is None or code in codes:
            return None
        return (
            f"caller {self.name!r} has the role {self.role.name!r}, which may send only "
            f"{', '.join(sorted(codes))}; not {code!r}."
        )

    def recorded(self, actor: actor_pb2.Actor) -> actor_pb2.Actor:
        """The sender the timeline records: the actor as sent when the role may name that kind
        of sender, else the caller itself, whatever the actor says."""
        # `service` names every kind, unspecified too: our own services may leave the kind to
        # the command service's default (a batch's is its integration).
        if actor.kind in self.role.names:
            return actor
        return actor_pb2.Actor(
            kind=self.role.own_kind,
            name=self.name,
            source_code=f"caller:{self.name}",
            screen=actor.screen or self.name,
        )


_CURRENT: ContextVar[Caller | None] = ContextVar("omnium_grpc_caller", default=None)


def current_caller() -> Caller | None:
    """The caller of the call being handled; None when the server takes calls without tokens
    (OMNIUM_GRPC_AUTH_REQUIRED=false), whose actors are then recorded as sent."""
    return _CURRENT.get()


def held_results_hidden() -> bool:
    """Whether the call being handled must not show results the checker holds: its caller is
    another team (a reader or a feed). A server without tokens shows everything."""
    caller = _CURRENT.get()
    return caller is not None and not caller.role.sees_held


def set_current_caller(caller: Caller | None) -> None:
    _CURRENT.set(caller)


#: How OMNIUM_GRPC_CALLERS gives a token as its hash: `sha256=` and 64 hex digits.
HASHED = "sha256="
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def token_hash(token: str) -> str:
    """What OMNIUM_GRPC_CALLERS may hold in place of a token: `sha256=<hex>`."""
    return HASHED + hashlib.sha256(token.encode()).hexdigest()


def _digest(item_token: str) -> bytes:
    """The sha256 a server keeps for one item's token, given plain or as `sha256=<hex>`."""
    if item_token.startswith(HASHED):
        return bytes.fromhex(item_token.removeprefix(HASHED))
    return hashlib.sha256(item_token.encode()).digest()


class Callers:
    """The tokens a server accepts, each with the caller it belongs to. A caller may have
    several tokens at once, so a token is rotated without a moment when none works.

    Only each token's sha256 is kept: a server's memory (or a dump of it) does not hold the
    tokens that let a caller in, and OMNIUM_GRPC_CALLERS may list the hashes alone."""

    def __init__(self, tokens: Iterable[tuple[str, Caller]]) -> None:
        self._digests = [(_digest(token), caller) for token, caller in tokens]
        #: Finds the person behind a console's session; set by a server with a database.
        self.sessions: SessionLookup | None = None
        #: Whether a scorer console may score with no one signed in (scorer sign-in off).
        self.anonymous_scorers = False

    @classmethod
    def parse(cls, items: Sequence[str]) -> Callers:
        """From OMNIUM_GRPC_CALLERS items, each `name:role:token` or `name:role:sha256=<hex>`."""
        found: list[tuple[str, Caller]] = []
        roles_of: dict[str, str] = {}
        owner: dict[str, str] = {}
        for item in items:
            name, role, token = (part.strip() for part in [*item.split(":", 2), "", ""][:3])
            if not (name and role and token):
                raise SettingsError(
                    f"OMNIUM_GRPC_CALLERS has {_shown(item)}; write each caller as "
                    "name:role:token, or name:role:sha256=<hex> with the token's hash "
                    "(python -m omnium_grpc hash-token), e.g. "
                    "admin-console:operator-console:sha256=<hex>."
                )
            if role not in ROLES:
                raise SettingsError(
                    f"OMNIUM_GRPC_CALLERS gives caller {name!r} the role {role!r}, which omnium "
                    f"does not know; the roles are {', '.join(ROLES)} (docs/callers.md)."
                )
            if roles_of.setdefault(name, role) != role:
                raise SettingsError(
                    f"OMNIUM_GRPC_CALLERS gives caller {name!r} two roles ({roles_of[name]} and "
                    f"{role}); a caller has one role. List it once per token, with one role."
                )
            if token.startswith(HASHED):
                token = HASHED + token.removeprefix(HASHED).lower()
                if not _HEX_DIGEST.match(token.removeprefix(HASHED)):
                    raise SettingsError(
                        f"OMNIUM_GRPC_CALLERS gives caller {name!r} a hash that is not 64 hex "
                        "digits after sha256=; make it with `python -m omnium_grpc hash-token` "
                        "(the token on its standard input)."
                    )
            # A token and its own hash are the same token: each caller needs its own.
            key = _digest(token).hex()
            if owner.setdefault(key, name) != name:
                raise SettingsError(
                    f"OMNIUM_GRPC_CALLERS gives callers {owner[key]!r} and {name!r} the same "
                    "token; each caller needs its own, or the log cannot say who called."
                )
            found.append((token, Caller(name, ROLES[role])))
        return cls(found)

    @classmethod
    def from_settings(cls, settings: Settings, *, server: str) -> Callers | None:
        """The server's callers; None when it takes calls without tokens."""
        if not settings.grpc.auth_required:
            return None
        if not settings.grpc.callers:
            raise SettingsError(
                f"{server}: OMNIUM_GRPC_CALLERS is empty, so no caller could be let in. List "
                "each caller as name:role:token (comma list; docs/callers.md), or set "
                "OMNIUM_GRPC_AUTH_REQUIRED=false on a private network."
            )
        callers = cls.parse(settings.grpc.callers)
        callers.anonymous_scorers = not settings.scoring.scorer_sign_in_required
        return callers

    def identify(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> Caller | str:
        """The caller whose token the call carries, or what is wrong with the call."""
        header = next((value for key, value in metadata or () if key == "authorization"), None)
        if header is None:
            return "this call needs 'authorization: Bearer <token>'; no token was sent"
        text = header.decode() if isinstance(header, bytes) else header
        scheme, _, token = text.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "the authorization header must be 'Bearer <token>'"
        given = hashlib.sha256(token.strip().encode()).digest()
        # Compare against every hash so the time taken does not say which one nearly matched.
        found: Caller | None = None
        for known, caller in self._digests:
            if hmac.compare_digest(given, known):
                found = caller
        return found if found is not None else "the bearer token is not one this service accepts"


def _shown(item: str) -> str:
    """An item as a message may show it: never a whole token."""
    parts = item.split(":")
    return ":".join([*parts[:2], "…"]) if len(parts) > 2 else f"an item of {len(parts)} part(s)"
