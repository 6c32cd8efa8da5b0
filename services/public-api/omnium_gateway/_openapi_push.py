"""What omnium pushes to clients, as the OpenAPI document describes it: the live stream's events
(their `event:` names and `data:` payloads) and the signed webhooks delivery POSTs."""

from __future__ import annotations

import json
from typing import Any

from omnium_live import STREAM_ID_PATTERN

# The `event:` names a live stream carries for saved changes: each outbox row's kind.
CHANGE_EVENTS: dict[str, str] = {
    "unit.created": "A unit was created (a schedule import named a unit not seen before).",
    "unit.changed": "A unit's fields, status or sides' scores and results changed.",
    "results.approved": "A person approved a unit's results held by the checker step; its "
    "changes carry every side's score, result, rank and medal as approved.",
    "competitor.changed": "A competitor's name or NOC changed.",
    "medal_row.changed": "A row of the medal table changed.",
}
# What the stream itself says between changes.
NOTICE_EVENTS: dict[str, str] = {
    "gap": "Some updates may be missing (Redis lost them, or this client fell behind and is "
    "disconnected): read the data again from the API.",
    "error": "Live updates paused; they resume by themselves.",
}

EXAMPLE_STREAM_ID = "1789876543210-0"
EXAMPLE_CHANGE = {
    "id": 48213,
    "kind": "unit.changed",
    "subject_kind": "unit",
    "unit": "ATHM100M--------------FNL-000100--",
    "code": "ATHM100M--------------FNL-000100--",
    "changes": [
        {"field": "status", "old": "SCHEDULED", "new": "RUNNING"},
        {"field": "sides[1].result", "old": None, "new": "9.87"},
    ],
    "saved_at": "2026-09-20T10:42:07.512+09:00",
}

SCHEMAS: dict[str, Any] = {
    "LiveChange": {
        "type": "object",
        "description": "One saved change, as the `data:` of a change event (JSON).",
        "required": ["id", "kind", "subject_kind", "unit", "code", "changes", "saved_at"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "integer", "description": "The change's number in omnium's log."},
            "kind": {"type": "string", "enum": list(CHANGE_EVENTS)},
            "subject_kind": {"type": "string", "enum": ["unit", "competitor", "medal_row"]},
            "unit": {
                "type": ["string", "null"],
                "description": "The unit's code when the change is to a unit, else null.",
            },
            "code": {
                "type": ["string", "null"],
                "description": "The changed record's code: a unit's ODF code, a competitor's "
                "code, or a medal row's `scope:NOC`.",
            },
            "changes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["field", "new"],
                    "additionalProperties": False,
                    "properties": {
                        "field": {
                            "type": "string",
                            "description": "`status`, `venue`, `sides[N].score` …",
                        },
                        "old": {"description": "The value before (absent on an approval)."},
                        "new": {"description": "The value now."},
                    },
                },
            },
            "saved_at": {"type": "string", "format": "date-time"},
        },
    },
    "LiveNotice": {
        "type": "object",
        "description": "The `data:` of a `gap` or `error` event (JSON).",
        "required": ["message"],
        "additionalProperties": False,
        "properties": {
            "message": {"type": "string"},
            "reason": {
                "const": "too slow",
                "description": "This client fell too far behind and was disconnected.",
            },
            "kind": {"const": "gap"},
            "lost": {
                "type": "integer",
                "minimum": 1,
                "description": "How many updates were lost, when omnium knows.",
            },
        },
    },
}


def _event(name: str, description: str, payload: str, with_id: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"$ref": f"#/components/schemas/{payload}"},
    }
    if payload == "LiveChange":
        data["contentSchema"] = {
            "allOf": [data["contentSchema"], {"properties": {"kind": {"const": name}}}]
        }
    event: dict[str, Any] = {
        "type": "object",
        "description": description,
        "required": ["event", "data", *(["id"] if with_id else [])],
        "properties": {
            "event": {"const": name},
            "data": data,
            "id": {"type": "string", "pattern": STREAM_ID_PATTERN},
            "retry": {"type": "integer", "minimum": 0},
        },
    }
    return event


# One Server-Sent Event of a live stream: `event:` says which, `data:` is JSON of the schema
# that event's entry names, `id:` the stream position to resume from (Last-Event-ID).
SSE_EVENT: dict[str, Any] = {
    "oneOf": [
        *(_event(name, text, "LiveChange", True) for name, text in CHANGE_EVENTS.items()),
        *(_event(name, text, "LiveNotice", False) for name, text in NOTICE_EVENTS.items()),
    ]
}
SSE_EXAMPLE = (
    f"id: {EXAMPLE_STREAM_ID}\nevent: unit.changed\n"
    f"data: {json.dumps(EXAMPLE_CHANGE, separators=(',', ':'))}\n\n"
    ": quiet\n\n"
    'event: error\ndata: {"message": "live updates paused; they resume by themselves"}\n\n'
)


# -- webhooks ------------------------------------------------------------------------------------

_SIGNATURE_HEADERS = [
    {
        "name": "webhook-id",
        "in": "header",
        "required": True,
        "description": "The message's id: the same on every try of one message, so a receiver "
        "can drop a repeat.",
        "schema": {"type": "string"},
        "example": "msg_dailyhunt_12_v7_3f2a9c0d1b4e",
    },
    {
        "name": "webhook-timestamp",
        "in": "header",
        "required": True,
        "description": "Unix seconds when this try was signed; refuse one far from your clock.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
        "example": "1789876543",
    },
    {
        "name": "webhook-signature",
        "in": "header",
        "required": True,
        "description": "`v1,` and the base64 HMAC-SHA256, keyed with the client's secret "
        "(`whsec_` and base64), of `webhook-id.webhook-timestamp.body`: the Standard Webhooks "
        "scheme, so their libraries verify it.",
        "schema": {"type": "string"},
        "example": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
    },
]
EXAMPLE_FEED_UPDATED = {
    "type": "feed.updated",
    "timestamp": "2026-09-20T01:42:09.118204+00:00",
    "data": {
        "client": "dailyhunt",
        "feed": 12,
        "kind": "medals",
        "format": "json",
        "file_name": "AG2026_GLO-------------------------------_DT_MEDALS_TOP5.json",
        "version": 7,
        "sha256": "3f2a9c0d1b4e8a7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170611",
        "document": {
            "document_type": "DT_MEDALS",
            "competition": "AG2026",
            "document_code": "GLO-------------------------------",
            "discipline": None,
            "version": 7,
            "subtype": "TOP5",
            "medals": [
                {"rank": 1, "noc": "CHN", "gold": 12, "silver": 8, "bronze": 5, "total": 25}
            ],
        },
    },
}
WEBHOOK_SCHEMAS: dict[str, Any] = {
    "FeedUpdated": {
        "type": "object",
        "required": ["type", "timestamp", "data"],
        "properties": {
            "type": {"const": "feed.updated"},
            "timestamp": {"type": "string", "format": "date-time"},
            "data": {
                "type": "object",
                "required": [
                    "client",
                    "feed",
                    "kind",
                    "format",
                    "file_name",
                    "version",
                    "sha256",
                    "document",
                ],
                "properties": {
                    "client": {"type": "string", "description": "Your client code."},
                    "feed": {"type": "integer", "description": "Which of your feeds."},
                    "kind": {"type": "string", "enum": ["schedule", "results", "medals"]},
                    "format": {"type": "string", "enum": ["json", "csv", "odf"]},
                    "file_name": {
                        "type": "string",
                        "description": "The ODF file name the same version has by SFTP.",
                    },
                    "version": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Grows with each new version of this feed; a message "
                        "with a version you have seen already may be dropped.",
                    },
                    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    "document": {
                        "description": "The feed's content: an object for the json format, "
                        "the file's text for csv and odf (ODF XML).",
                        "oneOf": [
                            {
                                "type": "object",
                                "required": [
                                    "document_type",
                                    "competition",
                                    "document_code",
                                    "discipline",
                                    "version",
                                ],
                                "properties": {
                                    "document_type": {"type": "string"},
                                    "competition": {"type": "string"},
                                    "document_code": {"type": "string"},
                                    "discipline": {"type": ["string", "null"]},
                                    "version": {"type": "integer"},
                                    "subtype": {"type": "string"},
                                    "units": {"type": "array", "items": {"type": "object"}},
                                    "medals": {"type": "array", "items": {"type": "object"}},
                                },
                            },
                            {"type": "string"},
                        ],
                    },
                },
            },
        },
    },
}
WEBHOOKS: dict[str, Any] = {
    "feed.updated": {
        "post": {
            "summary": "A new version of one of your feeds (a media client sent by webhook)",
            "description": (
                "Delivery POSTs each new version of a feed to the client's webhook URL, signed "
                "as Standard Webhooks say (verify with their library and your `whsec_` "
                "secret). A 2xx answer is delivered; 408, 409, 425, 429 and 5xx, or no answer "
                "in time, are tried again with growing waits (the same webhook-id); any other "
                "4xx is taken as refused and not tried again."
            ),
            "operationId": "feedUpdated",
            "security": [],
            "parameters": _SIGNATURE_HEADERS,
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/FeedUpdated"},
                        "example": EXAMPLE_FEED_UPDATED,
                    }
                },
            },
            "responses": {
                "2XX": {"description": "Received: the message is delivered."},
                "4XX": {"description": "Refused (not tried again), except 408, 409, 425 and 429."},
                "5XX": {"description": "Tried again later."},
            },
        }
    }
}
