"""Audit events: one JSON object per line on the `omnium.audit` logger (sign-ins, throttles,
account and role changes, API keys made and turned off). Never a password, token, session id
or key: callers pass only the fields below, and nothing else is added."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

audit_log = logging.getLogger("omnium.audit")


def audit(event: str, **fields: str | int | float | bool | None) -> None:
    """One event: `event` (e.g. "sign_in") and plain fields (login, console, address, outcome,
    by...). Logged at INFO, so a deployment keeps them wherever it keeps its logs."""
    record: dict[str, object] = {
        "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "event": event,
    }
    record.update(fields)
    audit_log.info(json.dumps(record, ensure_ascii=False, default=str))
