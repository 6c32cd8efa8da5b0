"""Keys a full run no longer lists: counted run by run, then asked about in Waiting for you."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from omnium_imports._keystate import KeyStateCache
from omnium_imports._review import open_review
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow


@dataclass(frozen=True, slots=True)
class Gone:
    """A key missing long enough to ask about: its key and our record's id."""

    key: str
    subject_id: str
    # A medal row's "<discipline code or empty>:<NOC>", the name its withdrawal takes.
    medal_ref: str | None = None


def changes(mapped: Sequence[MappedRow], key_state: KeyStateCache) -> tuple[list[str], list[str]]:
    """The keys this run no longer lists, and those it lists again after missing them."""
    listed = {row.key for row in mapped if row.key}
    missing = [
        key
        for key, state in key_state.keys.items()
        if key not in listed and state.subject_id is not None
    ]
    back = [key for key in listed if key_state.missing.get(key)]
    return missing, back


async def mark(
    conn: asyncpg.Connection,
    integration_id: str,
    run_id: str,
    missing: list[str],
    back: list[str],
    needed: int,
) -> tuple[dict[str, int], list[Gone]]:
    """Count the missing keys, in one transaction the caller opens: safe to repeat for the same
    run. `needed` runs in a row asks a person. Answers each key's count, and the keys asked
    about (to cancel, if the integration says so; one cancelled already is not among them)."""
    rows = await conn.fetch(
        *QUERIES.bind(
            "mark_missing",
            integration_id=integration_id,
            missing_keys=missing,
            listed_keys=back,
            run_id=run_id,
        )
    )
    # A key listed again is not missing: its question closes by itself.
    listed_again = [row["subject_key"] for row in rows if row["missing_runs"] == 0]
    await conn.execute(
        *QUERIES.bind(
            "close_reviews",
            integration_id=integration_id,
            kind="missing",
            subject_keys=listed_again,
            resolved_by="import",
        )
    )
    counts: dict[str, int] = {}
    asked: list[Gone] = []
    for row in rows:
        counts[row["subject_key"]] = row["missing_runs"]
        if row["missing_runs"] < needed or row["gone_already"]:
            # A unit cancelled (or a medal row withdrawn) already: there is nothing to ask.
            continue
        question = (
            f"Scout's last {row['missing_runs']} full runs no longer list "
            f"{row['subject_key']}. Cancel it, or dismiss this if it is still on."
            if row["medal_ref"] is None
            else f"Scout's last {row['missing_runs']} full medal tables no longer list "
            f"{row['subject_key']}. Confirm to take its row out of the table (a medal taken "
            "back), or dismiss this if it should stay."
        )
        await open_review(
            conn,
            integration_id,
            "missing",
            row["subject_key"],
            question,
            run_id,
            row["subject_id"],
        )
        if row["subject_id"]:
            asked.append(Gone(row["subject_key"], row["subject_id"], row["medal_ref"]))
    return counts, asked


async def answered(
    conn: asyncpg.Connection, integration_id: str, key: str, status: str, by: str
) -> None:
    """A key's missing question answered (in a transaction): closed, and the key not counted or
    asked about again until a run lists it and it goes missing once more."""
    await conn.execute(QUERIES["answer_missing"], integration_id, key)
    await conn.execute(
        *QUERIES.bind(
            "answer_review",
            integration_id=integration_id,
            kind="missing",
            subject_key=key,
            status=status,
            resolved_by=by,
        )
    )
