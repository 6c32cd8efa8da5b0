"""The gateway's OpenAPI document as served: valid OpenAPI 3.1 (openapi-spec-validator), with
servers, a contact, the webhooks delivery sends, and an example on every body that is valid
against its own schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openapi_spec_validator import validate

from omnium_gateway._openapi import document
from omnium_gateway._openapi_push import CHANGE_EVENTS, NOTICE_EVENTS
from omnium_gateway._route_sets import default_route_sets
from omnium_live import _routes as live_routes
from omnium_settings import Settings
from tests.support.openapi import schema_validator


def served(**overrides: Any) -> dict[str, Any]:
    """The document as the gateway serves it, from the settings given."""
    settings = Settings.from_env({}, redis_url="redis://127.0.0.1:1", **overrides)
    parts = [route_set.openapi() for route_set in default_route_sets(settings)]
    doc = document(parts, anonymous=True, public_metrics=True, site=settings.gateway)
    # What goes over the wire: JSON, so nothing but JSON types may be in it.
    loaded: dict[str, Any] = json.loads(json.dumps(doc))
    return loaded


def bodies(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every body the document describes (answers, and the webhooks' requests), named."""
    found = []
    for section in ("paths", "webhooks"):
        for path, item in doc[section].items():
            for method, operation in item.items():
                for status, answer in operation.get("responses", {}).items():
                    for media_type, content in answer.get("content", {}).items():
                        found.append((f"{method.upper()} {path} {status} {media_type}", content))
                request = operation.get("requestBody", {}).get("content", {})
                for media_type, content in request.items():
                    found.append((f"{method.upper()} {path} request {media_type}", content))
    return found


def test_the_document_is_valid_openapi_3_1() -> None:
    validate(served())
    validate(served(gateway_public_url="https://api.example.org/", gateway_api_keys=()))


def test_servers_and_contact_come_from_the_settings() -> None:
    default = served()
    assert default["servers"] == [
        {"url": "/", "description": "The gateway this document was read from"}
    ]
    assert default["info"]["contact"] == {"name": "omnium API support"}
    set_up = served(
        gateway_public_url="https://api.example.org/",
        gateway_contact_name="Media desk",
        gateway_contact_email="media@example.org",
    )
    assert set_up["servers"][0]["url"] == "https://api.example.org"
    assert set_up["info"]["contact"] == {"name": "Media desk", "email": "media@example.org"}


def test_every_body_has_an_example_valid_against_its_schema() -> None:
    doc = served()
    found = bodies(doc)
    assert len(found) > 40, "the walk found too few bodies to be reading the document"
    for name, content in found:
        assert "example" in content, f"{name} has no example"
        if name.endswith("application/json"):
            errors = list(schema_validator(doc, content["schema"]).iter_errors(content["example"]))
            assert not errors, f"{name}: its example does not fit its schema: {errors[0].message}"


def test_a_wrong_example_is_caught() -> None:
    """The check above reads the examples: one that breaks its schema fails it."""
    doc = served()
    content = doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    content["application/json"]["example"] = {"events": [{"code": "AG2026"}]}
    schema = content["application/json"]["schema"]
    example = content["application/json"]["example"]
    assert list(schema_validator(doc, schema).iter_errors(example))


def test_webhooks_describe_the_signed_feed_message() -> None:
    doc = served()
    hook = doc["webhooks"]["feed.updated"]["post"]
    headers = {p["name"] for p in hook["parameters"] if p["in"] == "header"}
    assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert hook["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/FeedUpdated"
    }


def _sse(raw: bytes) -> dict[str, str]:
    fields = {}
    for line in raw.decode().strip("\n").split("\n"):
        name, _, value = line.partition(": ")
        fields[name] = value
    return fields


@pytest.mark.parametrize("raw", [live_routes._GAP, live_routes._TOO_SLOW, live_routes._PAUSED])
def test_the_streams_own_notices_are_documented_events(raw: bytes) -> None:
    """`gap` and `error` are written by the stream itself (no change behind them): each is one
    of the documented events, its data valid against that event's schema."""
    doc = served()
    live = doc["paths"]["/v1/events/{event}/live"]["get"]["responses"]["200"]
    schema = live["content"]["text/event-stream"]["schema"]
    event = _sse(raw)
    assert event["event"] in NOTICE_EVENTS
    by_name = {v["properties"]["event"]["const"]: v for v in schema["oneOf"]}
    assert set(by_name) == set(CHANGE_EVENTS) | set(NOTICE_EVENTS)
    data = by_name[event["event"]]["properties"]["data"]["contentSchema"]
    errors = list(schema_validator(doc, data).iter_errors(json.loads(event["data"])))
    assert not errors, errors[0].message
