"""Setting an integration up: its row, its mapping version, its lookups, reference data."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import asyncpg

from omnium_imports._sql import QUERIES


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
    """Create or update the integration and give it the mapping as a new current version."""
    async with conn.transaction():
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
        await conn.fetchval(QUERIES["add_version"], integration_id, dict(spec.mapping), None)
    return integration_id


async def add_lookups(
    conn: asyncpg.Connection, integration_id: str, kind: str, ours: Mapping[str, str]
) -> None:
    """Scout's ids (keys) to ours (values), for the mapping's look-up steps."""
    await conn.execute(
        QUERIES["add_lookups"], integration_id, kind, list(ours), list(ours.values())
    )


async def load_reference(conn: asyncpg.Connection, reference: Mapping[str, Any]) -> dict[str, str]:
    """The Games, disciplines and competitors from a reference listing (the Scout simulator's
    /control/reference). Returns Scout's competitor ids → ours, for the lookups.
    """
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
