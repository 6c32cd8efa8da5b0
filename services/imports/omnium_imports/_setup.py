"""Setting an integration up: its row, its mapping version, its lookups, reference data.

Every function here takes any asyncpg connection: a plain `asyncpg.connect()` one as well as
one from `omnium_db.create_pool` (JSON goes to and from PostgreSQL as text, so no codec is
needed). What a person gives is checked first (`_files`, `_reference`): `SetupError` lists
each problem with its place. The file formats are in services/imports/README.md (integration,
lookups) and README-reference.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

import asyncpg

from omnium_imports._files import STATES, IntegrationSpec, LookupLine, checked_mapping
from omnium_imports._inputs import Problem, SetupError
from omnium_imports._reference import check_reference
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import LOOKUP_KINDS


async def register_integration(
    conn: asyncpg.Connection,
    spec: IntegrationSpec,
    *,
    check_seconds: int = 600,
    rotation_seconds: int = 3600,
) -> str:
    """Create or update the integration and give it the mapping as its current version (the
    same mapping as the current version adds none). An integration that exists keeps its state.
    `check_seconds` is the interval when the file gives none (OMNIUM_CHECK_SECONDS); a secret
    replaced keeps the previous one for `rotation_seconds` (OMNIUM_SECRET_ROTATION_SECONDS).
    """
    version = checked_mapping(spec.mapping, ("mapping",))
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
        upsert = QUERIES.statement("upsert_integration")
        integration_id: str = await conn.fetchval(
            upsert.text,
            *upsert.args(
                {
                    "code": spec.code,
                    "event_code": spec.event_code,
                    "name": spec.name,
                    "state": spec.state,
                    "target": spec.target,
                    "base_url": spec.base_url,
                    "job": spec.job,
                    "secret": spec.secret,
                    "check_seconds": spec.check_seconds or check_seconds,
                    "creates_units": spec.creates_units,
                    "settings": json.dumps(dict(spec.settings)),
                    "rotation_seconds": rotation_seconds,
                }
            ),
        )
        await add_version(conn, integration_id, spec.mapping)
    return integration_id


async def add_version(
    conn: asyncpg.Connection,
    integration_id: str,
    mapping: Mapping[str, object],
    note: str | None = None,
) -> tuple[int, bool]:
    """Make the mapping the integration's current version: (its version, whether it is new).
    The same mapping as the current version adds none. The mapping is checked first."""
    checked_mapping(mapping, ())
    try:
        row = await conn.fetchrow(
            *QUERIES.bind(
                "add_version",
                integration_id=integration_id,
                mapping=json.dumps(dict(mapping)),
                note=note,
            )
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
        *QUERIES.bind(
            "add_lookups",
            integration_id=integration_id,
            kind=kind,
            external_ids=list(ours),
            our_ids=list(ours.values()),
        )
    )


async def resolve_ours(
    conn: asyncpg.Connection, integration_id: str, kind: str, ours: Sequence[str]
) -> list[str | None]:
    """Our ids for codes (or ids) of competitors or units of the integration's event, in order;
    None for one we do not have."""
    rows = await conn.fetch(
        *QUERIES.bind("resolve_ours", integration_id=integration_id, kind=kind, ours=list(ours))
    )
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
            *QUERIES.bind(
                "upsert_event",
                code=event["code"],
                name=event["name"],
                time_zone=event["timeZone"],
                starts_on=_date(event.get("firstDay")),
                ends_on=_date(event.get("lastDay")),
            )
        )
        disciplines = reference["disciplines"]
        await conn.execute(
            *QUERIES.bind(
                "upsert_disciplines",
                event_id=event_id,
                codes=[d["code"] for d in disciplines],
                names=[d["name"] for d in disciplines],
            )
        )
        competitors = reference["competitors"]
        await conn.execute(
            *QUERIES.bind(
                "upsert_competitors",
                event_id=event_id,
                codes=[c["externalId"] for c in competitors],
                names=[c["name"] for c in competitors],
                nocs=[c["noc"] for c in competitors],
                kinds=["team" if c.get("kind") == "team" else "person" for c in competitors],
                disciplines=[c.get("discipline") for c in competitors],
            )
        )
        rows = await conn.fetch(
            QUERIES["competitor_ids"], event_id, [c["externalId"] for c in competitors]
        )
    return {row["code"]: row["id"] for row in rows}


def _date(text: str | None) -> date | None:
    return date.fromisoformat(text) if text else None


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
