"""Values the schema allows, for code that checks or lists them before the database does."""

from __future__ import annotations

# unit.status, in the order of its CHECK in 0001_core.sql (a test keeps the two the same).
UNIT_STATUSES = (
    "SCHEDULED",
    "DELAYED",
    "GETTING_READY",
    "RUNNING",
    "INTERRUPTED",
    "UNOFFICIAL",
    "OFFICIAL",
    "PROTESTED",
    "POSTPONED",
    "RESCHEDULED",
    "CANCELLED",
)
