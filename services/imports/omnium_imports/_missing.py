"""Keys a full run no longer lists: counted run by run, then asked about in Waiting for you."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from omnium_imports._keystate import KeyStateCache
from omnium_imports._review import open_review
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow

# Sends the cancel of a missing unit: its key and our unit's id.
Cancel = Callable[[str, str], Awaitable[None]]


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
    key_state: KeyStateCache,
    needed: int,
    cancel: Cancel | None,
) -> None:
    """Count the missing keys; `needed` runs in a row asks a person (and cancels, if given)."""
    rows = await conn.fetch(QUERIES["mark_missing"], integration_id, missing, back)
    # A key listed again is not missing: its question closes by itself.
    listed_again = [row["subject_key"] for row in rows if row["missing_runs"] == 0]
    await conn.execute(QUERIES["close_reviews"], integration_id, "missing", listed_again, "import")
    for row in rows:
        key_state.missing[row["subject_key"]] = row["missing_runs"]
        if row["missing_runs"] < needed:
            continue
        question = (
            f"Scout's last {row['missing_runs']} full runs no longer list "
            f"{row['subject_key']}. Cancel it, or dismiss this if it is still on."
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
        if cancel is not None and row["subject_id"]:
            await cancel(row["subject_key"], row["subject_id"])
