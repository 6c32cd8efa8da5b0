"""Whether a scorer may act on a match: with assignment on, a scorer account scores only the
matches assigned to it (by match, or by venue and day); refusals are recorded for operators."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import asyncpg

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_db import is_outage
from omnium_scoring._sql import QUERIES
from omnium_settings import Settings

log = logging.getLogger(__name__)
ACCOUNT = "account:"


def account_of(actor: actor_pb2.Actor) -> str | None:
    """The account id behind a scorer's actor (source_code "account:<id>"), or None."""
    if not actor.source_code.startswith(ACCOUNT):
        return None
    try:
        return str(uuid.UUID(actor.source_code.removeprefix(ACCOUNT)))
    except ValueError:
        return None


class Assigned:
    """The check, with what it last answered per account and match.

    The answers are kept only while the process listens for changes (`listening`): every
    assignment and every change of an account's role or on/off sends a NOTIFY, and `forget`
    drops them all, so a match handed to another scorer is refused to the first at once. A
    unit moved to another venue or day counts within OMNIUM_SCORING_MATCH_CACHE_SECONDS.
    """

    def __init__(self, settings: Settings, reader: asyncpg.Pool, writer: asyncpg.Pool) -> None:
        self.settings = settings
        self.reader = reader
        self.writer = writer
        self.listening = False
        # How many times the answers were dropped (a NOTIFY, a reconnect): tests wait on it.
        self.forgotten = 0
        self._known: dict[tuple[str, str], tuple[float, str | None]] = {}

    @property
    def required(self) -> bool:
        return self.settings.scoring.scorer_assignment_required

    def forget(self) -> None:
        self._known.clear()
        self.forgotten += 1

    def binds(self, actor: actor_pb2.Actor) -> bool:
        """Whether assignment applies to this sender: scorers do, providers never."""
        return self.required and actor.kind == actor_pb2.Actor.KIND_SCORER

    async def problem(self, actor: actor_pb2.Actor, unit_id: str) -> str | None:
        """Why this scorer may not act on this match, in a scorer's words; None: it may."""
        if not self.binds(actor):
            return None
        account_id = account_of(actor)
        if account_id is None:
            return "sign in first: matches are assigned to scorers by their account"
        key = (account_id, unit_id)
        hit = self._known.get(key)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        row = await self.reader.fetchrow(QUERIES["may_score"], account_id, unit_id)
        reason = _reason(row)
        seconds = self.settings.scoring.match_cache_seconds
        if self.listening and seconds > 0 and row is not None:
            if len(self._known) > 10_000:
                self._known.clear()
            self._known[key] = (now + seconds, reason)
        return reason

    async def read_problem(self, actor: actor_pb2.Actor, unit_id: str) -> str | None:
        """Why this scorer may not follow this match, in a scorer's words; None: it may. A
        scorer reads only the matches it may score, as the list shows it only those."""
        reason = await self.problem(actor, unit_id)
        if reason is None:
            return None
        if account_of(actor) is None:
            return "sign in first: a scorer follows only the matches assigned to them"
        if " not to you" in reason or "not assigned to you" in reason:
            return (
                "this match is not assigned to you, so it is not shown here. Ask an operator "
                "to assign it to you."
            )
        return reason

    async def record(self, actor: actor_pb2.Actor, action: scoring_pb2.Action, reason: str) -> None:
        """Keep the refusal where an operator looks (the console's Scorers screen); an outage
        does not turn the refusal into an error."""
        try:
            await self.writer.execute(
                *QUERIES.bind(
                    "record_refusal",
                    client_id=action.client_id,
                    unit_id=action.unit_id,
                    account_id=account_of(actor),
                    actor_name=actor.name or "scorer (not signed in)",
                    screen=actor.screen or None,
                    kind=action.kind,
                    reason=reason,
                )
            )
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning("refusal of %s not recorded: %r", action.client_id, exc)

    def listing(self, actor: actor_pb2.Actor) -> dict[str, Any]:
        """The list query's arguments for whose matches to list."""
        return {"assigned_only": self.binds(actor), "account_id": account_of(actor)}


def _reason(row: asyncpg.Record | None) -> str | None:
    if row is None:
        return None  # No such unit: the match's own read says so.
    if row["role"] is None:
        return "your account is not known here (was it removed?): sign in again"
    if row["disabled"]:
        return "your account is turned off: ask an operator"
    if row["role"] in ("operator", "admin"):
        return None  # They may score any match (and edit any on the console).
    if row["role"] != "scorer":
        return f"your account is a {row['role']}, who does not score"
    return _unassigned_reason(row)


def _unassigned_reason(row: asyncpg.Record) -> str | None:
    """For a scorer: None if the match is theirs, else who has it and what to do."""
    if row["assigned"]:
        return None
    match = row["unit_name"]
    if row["scorers"]:
        return (
            f"{match} is assigned to {row['scorers']}, not to you: this action was not saved. "
            "Tell them or an operator what it was."
        )
    return (
        f"{match} is not assigned to you (no scorer has it yet): this action was not saved. "
        "Ask an operator to assign it to you."
    )
