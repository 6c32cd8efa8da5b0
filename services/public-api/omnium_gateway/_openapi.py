"""The OpenAPI 3.1 document, assembled from parts: the core reads here, more from route sets."""

from __future__ import annotations

import copy
from typing import Any

from omnium_db import UNIT_STATUSES
from omnium_gateway import _openapi_push as push
from omnium_gateway._cors import TOKEN_OPENAPI
from omnium_gateway._openapi_examples import add_examples
from omnium_settings import GatewaySettings

EVENT_PATTERN = "^[A-Z0-9_-]{2,32}$"
UNIT_PATTERN = "^[A-Z0-9-]{34}$"
DISCIPLINE_PATTERN = "^[A-Z]{3}$"
MAX_TOP = 1000


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str, **extra: object) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


_CACHE_HEADERS = {
    "ETag": {
        "description": "Opaque version of the body; send it back in If-None-Match.",
        "schema": {"type": "string"},
    },
    "Cache-Control": {
        "description": "max-age, stale-while-revalidate and stale-if-error, from "
        "how fast the data changes.",
        "schema": {"type": "string"},
    },
    "X-Cache": {
        "description": "HIT (from memory or Redis), MISS (read from the database) or "
        "STALE (an older copy while one refresh runs).",
        "schema": {"type": "string", "enum": ["HIT", "MISS", "STALE"]},
    },
}


def _json(schema: dict[str, Any], description: str, headers: bool = True) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }
    if headers:
        answer["headers"] = _CACHE_HEADERS
    return answer


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        "400": "A query parameter is not valid; `parameter` names it.",
        "401": "The X-API-Key is not known (or a key is required and none was sent).",
        "404": "No such event, unit or discipline (cached briefly).",
        "429": "Over this key's rate limit (or, without a key, this address's); wait "
        "Retry-After seconds.",
        "503": "The database cannot answer and nothing is cached for this request.",
    }
    answers: dict[str, Any] = {}
    for code in codes:
        answer = _json(_ref("Error"), text[str(code)], headers=code == 404)
        if code in (429, 503):
            answer["headers"] = {"Retry-After": {"schema": {"type": "string"}}}
        answers[str(code)] = answer
    return answers


def _read(summary: str, schema: str, params: list[dict[str, Any]], *extra: int) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": _json(_ref(schema), summary),
        "304": {
            "description": "Not modified: the If-None-Match ETag is still current.",
            "headers": _CACHE_HEADERS,
        },
    }
    responses.update(_errors(*extra, 401, 429, 503))
    return {
        "get": {
            "summary": summary,
            "operationId": schema[0].lower() + schema[1:],
            "parameters": [*params, _IF_NONE_MATCH],
            "responses": responses,
        }
    }


_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
}
EXAMPLE_EVENT = "AG2026"
EXAMPLE_UNIT = "ATHM100M--------------FNL-000100--"
_EVENT = {
    "name": "event",
    "in": "path",
    "required": True,
    "description": "The event's code.",
    "schema": {"type": "string", "pattern": EVENT_PATTERN},
    "example": EXAMPLE_EVENT,
}
_UNIT = {
    "name": "unit_code",
    "in": "path",
    "required": True,
    "description": "The unit's ODF code (34 characters).",
    "schema": {"type": "string", "pattern": UNIT_PATTERN},
    "example": EXAMPLE_UNIT,
}

_SIDE = {
    "type": "object",
    "required": ["order", "competitor", "score", "result", "rank", "medal"],
    "properties": {
        "order": {"type": "integer", "minimum": 1},
        "competitor": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["code", "name", "noc"],
                    "properties": {
                        "code": {"type": "string"},
                        "name": {"type": "string"},
                        "noc": {"type": "string"},
                    },
                },
            ]
        },
        "score": _nullable("string"),
        "result": _nullable("string"),
        "rank": _nullable("integer"),
        "medal": {"enum": ["GOLD", "SILVER", "BRONZE", None]},
    },
}
_UNIT_FIELDS = {
    "code": {"type": "string"},
    "name": {"type": "string"},
    "discipline": {"type": "string"},
    "phase": {"type": "string"},
    "start_at": _nullable("string", format="date-time"),
    "venue": _nullable("string"),
    "status": {"type": "string", "enum": list(UNIT_STATUSES)},
    "held": {
        "type": "boolean",
        "description": (
            "True while a checker holds this unit's results: its sides' scores, results, "
            "ranks and medals show as a person last approved them, and none before the first "
            "approval."
        ),
    },
    "sides": {"type": "array", "items": _ref("Side")},
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}, "parameter": {"type": "string"}},
    },
    "Event": {
        "type": "object",
        "required": ["code", "name", "time_zone", "starts_on", "ends_on"],
        "properties": {
            "code": {"type": "string"},
            "name": {"type": "string"},
            "time_zone": {"type": "string"},
            "starts_on": _nullable("string", format="date"),
            "ends_on": _nullable("string", format="date"),
        },
    },
    "Events": {
        "type": "object",
        "required": ["events"],
        "properties": {"events": {"type": "array", "items": _ref("Event")}},
    },
    "Disciplines": {
        "type": "object",
        "required": ["event", "disciplines"],
        "properties": {
            "event": {"type": "string"},
            "disciplines": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["code", "name", "units"],
                    "properties": {
                        "code": {"type": "string"},
                        "name": {"type": "string"},
                        "units": {"type": "integer", "minimum": 0},
                    },
                },
            },
        },
    },
    "Side": _SIDE,
    "ScheduledUnit": {
        "type": "object",
        "required": list(_UNIT_FIELDS),
        "properties": _UNIT_FIELDS,
    },
    "Schedule": {
        "type": "object",
        "required": ["event", "filters", "units"],
        "properties": {
            "event": {"type": "string"},
            "filters": {
                "type": "object",
                "required": ["date", "discipline", "status"],
                "properties": {
                    "date": _nullable("string", format="date"),
                    "discipline": _nullable("string"),
                    "status": _nullable("string"),
                },
            },
            "units": {"type": "array", "items": _ref("ScheduledUnit")},
        },
    },
    "Unit": {
        "type": "object",
        "required": ["event", *_UNIT_FIELDS, "updated_at"],
        "properties": {
            "event": {"type": "string"},
            **_UNIT_FIELDS,
            "updated_at": {"type": "string", "format": "date-time"},
        },
    },
    "Medals": {
        "type": "object",
        "required": ["event", "top", "rows"],
        "properties": {
            "event": {"type": "string"},
            "top": _nullable("integer"),
            "held": {
                "type": "boolean",
                "description": "True while a result that decides medals waits for a person's "
                "approval (the checker step): the table then has no rows until it is approved.",
            },
            "note": {"type": "string", "description": "Why the table is held, when it is."},
            "rows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["rank", "noc", "gold", "silver", "bronze", "total"],
                    "properties": {
                        "rank": _nullable("integer"),
                        "noc": {"type": "string"},
                        "gold": {"type": "integer", "minimum": 0},
                        "silver": {"type": "integer", "minimum": 0},
                        "bronze": {"type": "integer", "minimum": 0},
                        "total": {"type": "integer", "minimum": 0},
                    },
                },
            },
        },
    },
}

_PLAIN = {"type": "object", "additionalProperties": True}
# Every route is limited per client address; these by a bucket apart from the reads'.
_ADDRESS_LIMIT = {
    "description": "Too many requests from this address; wait Retry-After seconds.",
    "headers": {"Retry-After": {"schema": {"type": "string"}}},
    "content": {"application/json": {"schema": _ref("Error")}},
}

PATHS: dict[str, Any] = {
    "/v1/events": _read("Every event (Games) omnium holds", "Events", []),
    "/v1/events/{event}/disciplines": _read(
        "An event's disciplines, with how many units each has", "Disciplines", [_EVENT], 404
    ),
    "/v1/events/{event}/schedule": _read(
        "An event's units in start order, with their sides",
        "Schedule",
        [
            _EVENT,
            {
                "name": "date",
                "in": "query",
                "required": False,
                "description": "Only units starting on this day, in the event's time zone.",
                "schema": {"type": "string", "format": "date"},
            },
            {
                "name": "discipline",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "pattern": DISCIPLINE_PATTERN},
            },
            {
                "name": "status",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "enum": list(UNIT_STATUSES)},
            },
        ],
        400,
        404,
    ),
    "/v1/events/{event}/units/{unit_code}": _read(
        "One unit: its status, sides, scores and results", "Unit", [_EVENT, _UNIT], 404
    ),
    "/v1/events/{event}/medals": _read(
        "The event's medal table, best first",
        "Medals",
        [
            _EVENT,
            {
                "name": "top",
                "in": "query",
                "required": False,
                "description": "Only the first N rows.",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TOP},
            },
        ],
        400,
        404,
    ),
    "/v1/openapi.json": {
        "get": {
            "summary": "This document",
            "operationId": "openapi",
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1",
                    "content": {"application/json": {"schema": _PLAIN}},
                },
                "429": _ADDRESS_LIMIT,
            },
        }
    },
    "/v1/docs": {
        "get": {
            "summary": "This document as a page to read (Redoc)",
            "operationId": "docs",
            "security": [{}],
            "responses": {
                "200": {
                    "description": "The page; its script is served beside it, never from a CDN.",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                },
                "429": _ADDRESS_LIMIT,
            },
        }
    },
    "/healthz": {
        "get": {
            "summary": "The process answers",
            "operationId": "healthz",
            "responses": {
                "200": {
                    "description": "Alive",
                    "content": {"application/json": {"schema": _PLAIN}},
                },
                "429": _ADDRESS_LIMIT,
            },
        }
    },
    "/readyz": {
        "get": {
            "summary": "Whether PostgreSQL and Redis answer, and how reads are served",
            "operationId": "readyz",
            "responses": {
                "200": {
                    "description": "Ready (perhaps degraded: see mode)",
                    "content": {"application/json": {"schema": _PLAIN}},
                },
                "503": {
                    "description": "Neither PostgreSQL nor Redis answers",
                    "content": {"application/json": {"schema": _PLAIN}},
                },
                "429": _ADDRESS_LIMIT,
            },
        }
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus counters, summed over the workers",
            "operationId": "metrics",
            "responses": {
                "200": {
                    "description": "Prometheus text format",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "429": _ADDRESS_LIMIT,
            },
        }
    },
}


# Every answer is counted against a bucket (a key's, or the client address's) and says so.
QUOTA_HEADERS = {
    "RateLimit-Policy": {
        "description": (
            "The bucket this answer drew on, as an IETF RateLimit-Policy item "
            '(draft-ietf-httpapi-ratelimit-headers): `"key"` (an API key), `"ip"` (reads '
            'without a key), `"console"` or `"other"` (per address); `q` requests at once, '
            "`w` seconds for an empty bucket to fill again."
        ),
        "schema": {"type": "string"},
        "example": '"key";q=500;w=5',
    },
    "RateLimit": {
        "description": (
            "What is left in that bucket: `r` requests, and `t` seconds until it is full again "
            "(an estimate while several workers share it)."
        ),
        "schema": {"type": "string"},
        "example": '"key";r=499;t=1',
    },
}


def _with_quota_headers(paths: dict[str, Any]) -> None:
    for operations in paths.values():
        for operation in operations.values():
            for answer in operation.get("responses", {}).values():
                answer["headers"] = {
                    **answer.get("headers", {}),
                    **{name: {"$ref": f"#/components/headers/{name}"} for name in QUOTA_HEADERS},
                }


def document(
    parts: list[dict[str, Any]],
    anonymous: bool,
    public_metrics: bool = False,
    *,
    site: GatewaySettings | None = None,
) -> dict[str, Any]:
    """The whole document: the core paths and schemas, then each route set's part, then the
    webhooks delivery sends and an example for every body. /metrics is in it only where the
    public port serves it (OMNIUM_GATEWAY_PUBLIC_METRICS). `site`: where clients reach the API
    and whom they ask (the servers and info.contact)."""
    site = site or GatewaySettings()
    paths = copy.deepcopy(PATHS)
    if not public_metrics:
        del paths["/metrics"]
    schemas = copy.deepcopy({**SCHEMAS, **push.SCHEMAS, **push.WEBHOOK_SCHEMAS})
    webhooks = copy.deepcopy(push.WEBHOOKS)
    for part in parts:
        paths.update(part.get("paths", {}))
        schemas.update(part.get("components", {}).get("schemas", {}))
        webhooks.update(part.get("webhooks", {}))
    paths.update(copy.deepcopy(TOKEN_OPENAPI))
    _with_quota_headers(paths)
    security: list[dict[str, list[str]]] = [{"apiKey": []}]
    if anonymous:
        security.append({})
    contact = {"name": site.contact_name}
    if site.contact_email:
        contact["email"] = site.contact_email
    server = {"url": "/", "description": "The gateway this document was read from"}
    if site.public_url:
        server = {"url": site.public_url.rstrip("/"), "description": "omnium public API"}
    answer = {
        "openapi": "3.1.0",
        "info": {
            "title": "omnium public API",
            "version": "1.0.0",
            "contact": contact,
            "description": (
                "Schedules, results and medal tables of a multi-sport event. Every read is "
                "cached; ETag / If-None-Match answers 304. Send X-API-Key; limits are per key. "
                "Live changes come as Server-Sent Events; media clients get their feeds by SFTP "
                "or by signed webhooks (see Webhooks). Samples: docs/clients/ in the repository."
            ),
        },
        "servers": [server],
        "security": security,
        "paths": paths,
        "webhooks": webhooks,
        "components": {
            "schemas": schemas,
            "headers": copy.deepcopy(QUOTA_HEADERS),
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
        },
    }
    add_examples(answer)
    return answer
