"""Examples for the OpenAPI document: one per body a response can carry, added to the document
once it is assembled (`add_examples`), so a route set's new answer only needs its schema here."""

from __future__ import annotations

from typing import Any

from omnium_gateway._openapi_push import SSE_EXAMPLE

_UNIT = "ATHM100M--------------FNL-000100--"
_SIDE = {
    "order": 1,
    "competitor": {"code": "ATH-M-JAM-0042", "name": "Kishane THOMPSON", "noc": "JAM"},
    "score": None,
    "result": "9.87",
    "rank": 1,
    "medal": "GOLD",
}
_SCHEDULED = {
    "code": _UNIT,
    "name": "Men's 100m Final",
    "discipline": "ATH",
    "phase": "FNL",
    "start_at": "2026-09-20T21:10:00+09:00",
    "venue": "Main Stadium",
    "status": "OFFICIAL",
    "held": False,
    "sides": [_SIDE],
}

# By the schema a JSON body has (its $ref's name).
BY_SCHEMA: dict[str, Any] = {
    "Error": {"error": "date must be a day like 2026-09-20.", "parameter": "date"},
    "Events": {
        "events": [
            {
                "code": "AG2026",
                "name": "Asian Games 2026",
                "time_zone": "Asia/Tokyo",
                "starts_on": "2026-09-19",
                "ends_on": "2026-10-04",
            }
        ]
    },
    "Disciplines": {
        "event": "AG2026",
        "disciplines": [{"code": "ATH", "name": "Athletics", "units": 48}],
    },
    "Schedule": {
        "event": "AG2026",
        "filters": {"date": "2026-09-20", "discipline": "ATH", "status": None},
        "units": [_SCHEDULED],
    },
    "Unit": {"event": "AG2026", **_SCHEDULED, "updated_at": "2026-09-20T21:11:02.481+09:00"},
    "Medals": {
        "event": "AG2026",
        "top": 3,
        "held": False,
        "rows": [
            {"rank": 1, "noc": "CHN", "gold": 12, "silver": 8, "bronze": 5, "total": 25},
            {"rank": 2, "noc": "JPN", "gold": 9, "silver": 10, "bronze": 7, "total": 26},
            {"rank": 3, "noc": "KOR", "gold": 7, "silver": 6, "bronze": 11, "total": 24},
        ],
    },
}

# By operation and status, for bodies of a plain schema.
BY_OPERATION: dict[tuple[str, str], Any] = {
    ("openapi", "200"): {"openapi": "3.1.0", "info": {"title": "omnium public API"}},
    ("healthz", "200"): {"status": "ok"},
    ("readyz", "200"): {
        "ready": True,
        "database": "ok",
        "redis": "ok",
        "mode": "every read through Redis and this worker's memory",
        "outbox_relay": True,
    },
    ("readyz", "503"): {
        "ready": False,
        "database": "down",
        "redis": "down",
        "mode": "PostgreSQL and Redis are both down: only copies in memory can be served",
        "outbox_relay": False,
    },
    ("metrics", "200"): "# TYPE omnium_gateway_requests_total counter\n",
    ("docs", "200"): "<!doctype html>…",
}
# By media type, for bodies that are not JSON.
BY_MEDIA_TYPE: dict[str, str] = {"text/event-stream": SSE_EXAMPLE}


def _example(operation: str, status: str, media_type: str, schema: dict[str, Any]) -> Any:
    name = str(schema.get("$ref", "")).rpartition("/")[2]
    if name in BY_SCHEMA:
        return BY_SCHEMA[name]
    if (operation, status) in BY_OPERATION:
        return BY_OPERATION[operation, status]
    return BY_MEDIA_TYPE.get(media_type)


def add_examples(document: dict[str, Any]) -> None:
    """Give every response body in `document` an example, where it has none yet."""
    for path in document["paths"].values():
        for operation in path.values():
            for status, answer in operation.get("responses", {}).items():
                for media_type, content in answer.get("content", {}).items():
                    if "example" in content or "examples" in content:
                        continue
                    found = _example(
                        operation.get("operationId", ""),
                        status,
                        media_type,
                        content.get("schema", {}),
                    )
                    if found is not None:
                        content["example"] = found
