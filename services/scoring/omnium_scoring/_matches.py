"""The matches as scorers and other teams read them: a match's state with its sides and the
sport's buttons, its recent and standing actions, and the list of matches a caller may score."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncpg

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_grpc import is_id
from omnium_scoring._assigned import Assigned
from omnium_scoring._checks import as_struct
from omnium_scoring._sql import QUERIES
from omnium_settings import Settings
from omnium_sports import UNDO, Sport, sport_for_discipline


class MatchReads:
    """The read model of the scoring service: one per process."""

    def __init__(
        self,
        settings: Settings,
        reader: asyncpg.Pool,
        sports: Mapping[str, Sport],
        assigned: Assigned,
    ) -> None:
        self.settings = settings
        self.reader = reader
        self.sports = sports
        self.assigned = assigned
        # What the console draws its buttons from: built once per sport, not per answer.
        self._described = {code: as_struct(sport.describe()) for code, sport in sports.items()}

    def sport_of(self, discipline: str, sport_file: str | None) -> Sport | None:
        if sport_file:
            return self.sports.get(Path(sport_file).stem)
        return sport_for_discipline(self.sports, discipline)

    def match_state(
        self,
        unit: Mapping[str, Any],
        sport: Sport | None,
        state: Mapping[str, Any] | None,
        seq: int,
        *,
        full: bool = True,
        status: str | None = None,
        into: scoring_pb2.MatchState | None = None,
        state_json: str | None = None,
        values: list[dict[str, Any]] | None = None,
    ) -> scoring_pb2.MatchState:
        """The match as a scorer sees it; `full` adds the sport's buttons and rules.

        Written `into` a message when given; `state_json` and `values` (the sport's side
        values) when the caller has them already.
        """
        out = scoring_pb2.MatchState() if into is None else into
        out.unit_id = unit["id"]
        out.unit_code = unit["code"]
        out.name = unit["name"]
        out.status = status or unit["status"]
        out.seq = seq
        names = {r[0]: r for r in unit["side_names"] or ()}
        if sport is not None:
            out.sport = sport.code
            if full:
                out.sport_actions.CopyFrom(self._described[sport.code])
            if state is None:
                state = sport.new_state(unit["side_count"] or 2)
            out.state_json = state_json or json.dumps(state, separators=(",", ":"))
            out.finished = bool(state.get("finished"))
            out.winner = int(state.get("winner") or 0)
            if values is None:
                values = sport.side_values(state)
            # As Sport.summary has it, without working the scores out again.
            out.summary = " - ".join(str(v["score"]) for v in values)
            for side in values:
                row = names.get(side["order"])
                out.sides.append(
                    scoring_pb2.SideScore(
                        order=side["order"],
                        name=(row[1] or "") if row else "",
                        noc=(row[2] or "") if row else "",
                        score=str(side.get("score") or ""),
                        result=str(side.get("result") or ""),
                        rank=int(side.get("rank") or 0),
                    )
                )
        return out

    async def get_state(
        self,
        unit_id: str,
        *,
        recent: int = 0,
        standing: bool = False,
        standing_after: int = 0,
        conn: asyncpg.Connection | None = None,
        full: bool = True,
    ) -> scoring_pb2.MatchState | None:
        if conn is None:
            async with self.reader.acquire() as own:
                return await self.get_state(
                    unit_id,
                    recent=recent,
                    standing=standing,
                    standing_after=standing_after,
                    conn=own,
                    full=full,
                )
        if not is_id(unit_id):
            return None
        unit = await conn.fetchrow(QUERIES["match"], unit_id, "")
        if unit is None:
            return None
        sport = self.sport_of(unit["discipline"], unit["sport_file"])
        out = self.match_state(unit, sport, unit["match_state"], unit["match_seq"], full=full)
        if recent > 0:
            for row in await conn.fetch(QUERIES["recent"], unit_id, recent):
                saved = scoring_pb2.SavedAction(
                    seq=row["seq"],
                    kind=row["kind"],
                    side=row["side"] or 0,
                    undoes=row["undoes"] or 0,
                    undone_by=row["undone_by"] or 0,
                    actor_name=row["actor_name"],
                    screen=row["screen"] or "",
                )
                saved.fields.CopyFrom(as_struct(row["fields"] or {}))
                saved.saved_at.FromDatetime(row["saved_at"])
                out.recent.append(saved)
        if standing:
            # What an undo replays (see _checks.undo): every action not an undo and not undone; or,
            # for a copy of an earlier seq, what changed since.
            after = standing_after if 0 < standing_after <= out.seq else 0
            out.standing_after = after
            for row in await conn.fetch(QUERIES["actions_after"], unit_id, after):
                if row["kind"] == UNDO:
                    if row["undoes"] is not None and row["undoes"] <= after:
                        out.undone_since.append(row["undoes"])
                    continue
                if row["undone_by"] is not None:
                    continue
                saved = scoring_pb2.SavedAction(
                    seq=row["seq"], kind=row["kind"], side=row["side"] or 0
                )
                saved.fields.CopyFrom(as_struct(row["fields"] or {}))
                if row["client_at"] is not None:
                    saved.client_at.FromDatetime(row["client_at"])
                out.standing.append(saved)
        return out

    async def list_matches(
        self, event_code: str, limit: int, actor: actor_pb2.Actor | None = None
    ) -> scoring_pb2.ListMatchesResponse:
        limit = min(limit or self.settings.scoring.list_limit, self.settings.scoring.list_limit)
        out = scoring_pb2.ListMatchesResponse()
        # No actor: every match (a caller that is not a scorer, as before).
        whose = self.assigned.listing(actor or actor_pb2.Actor())
        listed = QUERIES.statement("list_matches")
        async with self.reader.acquire() as conn:
            rows = await conn.fetch(
                listed.text, *listed.args({"event_code": event_code, "limit": limit, **whose})
            )
        for row in rows:
            sport = self.sport_of(row["discipline"], row["sport_file"])
            if sport is None:
                continue
            item = scoring_pb2.MatchListItem(
                unit_id=row["id"],
                unit_code=row["code"],
                name=row["name"],
                status=row["status"],
                sport=sport.code,
            )
            if row["start_at"] is not None:
                item.start_at.FromDatetime(row["start_at"])
            if row["match_state"]:
                item.summary = sport.summary(row["match_state"])
            out.matches.append(item)
        return out
