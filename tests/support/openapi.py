"""Reading the gateway's OpenAPI document in tests: its schemas as JSON Schema validators."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT_URI = "urn:omnium:openapi"


def schema_validator(doc: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for `schema`, whose #/components/... refs point into `doc`."""
    registry: Registry[Any] = Registry().with_resource(
        DOCUMENT_URI, Resource.from_contents(doc, default_specification=DRAFT202012)
    )
    text = json.dumps(schema).replace('"$ref": "#/', f'"$ref": "{DOCUMENT_URI}#/')
    return Draft202012Validator(json.loads(text), registry=registry)
