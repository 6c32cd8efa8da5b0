"""Pages on other origins: CORS for the public API, and signed tokens for live streams.

A browser sends `Origin` with a cross-origin call and reads the answer only when it names that
origin (or `*`) in `Access-Control-Allow-Origin`. The origins allowed are a setting; `*` opens
only what anyone may read without a key (the reads and the streams, never a key's answers). A
call that sends X-API-Key is first asked about in a preflight (OPTIONS), answered here.

`EventSource` cannot send headers, so a page asks for a token with its key
(`POST /v1/live/tokens`) and opens the stream with `?token=`. A token names the key, expires
after `OMNIUM_GATEWAY_STREAM_TOKEN_SECONDS`, and is signed with HMAC-SHA256: any copy with the
same secret checks it without asking anyone, and a key turned off stops its tokens too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from omnium_settings import Settings

TOKEN_PATH = "/v1/live/tokens"
# Headers a page may send: its key, a stream's resume point, and a conditional read's ETag.
_KEYED_HEADERS = "X-API-Key, Last-Event-ID, If-None-Match"
_PUBLIC_HEADERS = "Last-Event-ID, If-None-Match"
# Headers a page may read beyond the safelisted ones.
_EXPOSED = "ETag, RateLimit, RateLimit-Policy, Retry-After, X-Cache"
_PREFLIGHT_VARY = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"


class Cors:
    """Which origins may read which answers; the headers that say so."""

    def __init__(self, settings: Settings) -> None:
        origins = settings.gateway.cors_origins
        self.anyone = "*" in origins
        self.named = frozenset(origin for origin in origins if origin != "*")
        self.max_age = str(settings.gateway.cors_max_age_seconds)
        self.on = bool(origins)

    @staticmethod
    def covers(path: str) -> bool:
        """The public API: not the scorer console, nor the providers' pushes."""
        return path.startswith("/v1/") and not path.startswith("/v1/providers/")

    def allow(self, origin: str | None, *, keyed: bool) -> str | None:
        """What Access-Control-Allow-Origin says to `origin`, or None: not allowed."""
        if origin is None:
            return None
        if origin in self.named:
            return origin
        return "*" if self.anyone and not keyed else None

    def answer(self, request: web.Request, answer: web.StreamResponse, keyed: bool) -> None:
        """Add the CORS headers to an answer about to be sent."""
        if self.named:
            # The answer differs by Origin: a shared cache must keep a copy per origin.
            vary = answer.headers.get("Vary")
            if vary is None:
                answer.headers["Vary"] = "Origin"
            elif "Origin" not in vary:
                answer.headers["Vary"] = f"{vary}, Origin"
        allowed = self.allow(request.headers.get("Origin"), keyed=keyed)
        if allowed is not None:
            answer.headers["Access-Control-Allow-Origin"] = allowed
            answer.headers["Access-Control-Expose-Headers"] = _EXPOSED

    def preflight(self, request: web.Request) -> web.Response | None:
        """The answer to a preflight, or None when `request` is a plain OPTIONS."""
        origin = request.headers.get("Origin")
        method = request.headers.get("Access-Control-Request-Method")
        if origin is None or method is None:
            return None
        asked = {
            name.strip().lower()
            for name in request.headers.get("Access-Control-Request-Headers", "").split(",")
            if name.strip()
        }
        keyed = "x-api-key" in asked or request.path == TOKEN_PATH
        allowed = self.allow(origin, keyed=keyed)
        headers = {"Vary": _PREFLIGHT_VARY, "Cache-Control": "no-store"}
        if allowed is None:
            why = (
                "a key may be sent only from an origin the operator names"
                if self.anyone
                else "the operator has not allowed it"
            )
            return web.json_response(
                {
                    "error": f"A page on {origin} may not call this API with these headers: "
                    f"{why} (OMNIUM_GATEWAY_CORS_ORIGINS)."
                },
                status=403,
                headers=headers,
            )
        methods = "GET, HEAD, POST" if request.path == TOKEN_PATH else "GET, HEAD"
        headers.update(
            {
                "Access-Control-Allow-Methods": methods,
                "Access-Control-Allow-Headers": _KEYED_HEADERS if keyed else _PUBLIC_HEADERS,
                "Access-Control-Max-Age": self.max_age,
            }
        )
        return web.Response(status=204, headers=headers)


_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
# The token route's part of the OpenAPI document.
TOKEN_OPENAPI: dict[str, Any] = {
    TOKEN_PATH: {
        "post": {
            "summary": "A short-lived token to open a live stream from a browser",
            "operationId": "liveToken",
            "description": (
                "EventSource cannot send X-API-Key: ask for a token with the key, then open "
                "the stream with `?token=`. It opens (and reopens) the key's streams until it "
                "expires; a stream already open stays open."
            ),
            "security": [{"apiKey": []}],
            "responses": {
                "200": {
                    "description": "The token, and when it expires.",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["token", "expires_at", "expires_in"],
                                "properties": {
                                    "token": {"type": "string"},
                                    "expires_at": {"type": "string", "format": "date-time"},
                                    "expires_in": {"type": "integer", "minimum": 1},
                                },
                            },
                            "example": {
                                "token": "eyJrIjoibmR0diIsImUiOjE3OTAwMDAwMDB9.Yt3vQm0pZ8fX2cQe",
                                "expires_at": "2026-09-20T12:05:00Z",
                                "expires_in": 300,
                            },
                        }
                    },
                },
                "401": {"description": "No API key, or an unknown one.", "content": _ERROR},
                "404": {"description": "This server gives no tokens.", "content": _ERROR},
                "429": {"description": "Over this key's rate limit.", "content": _ERROR},
            },
        }
    }
}
# The live streams' query parameter that carries it.
TOKEN_PARAMETER = {
    "name": "token",
    "in": "query",
    "required": False,
    "description": f"A token from POST {TOKEN_PATH}, in place of X-API-Key (for EventSource).",
    "schema": {"type": "string"},
}


class BadToken(Exception):
    """A token that opens nothing; the message says what to do."""


@dataclass(frozen=True, slots=True)
class StreamTokens:
    """Make and check the signed tokens a browser opens a live stream with."""

    secrets: tuple[bytes, ...]
    seconds: int

    @classmethod
    def from_settings(cls, settings: Settings) -> StreamTokens:
        secrets = tuple(s.encode() for s in settings.gateway.stream_token_secrets if s)
        return cls(secrets, settings.gateway.stream_token_seconds)

    def make(self, key_name: str, now: float | None = None) -> tuple[str, int]:
        """A token for the key named `key_name`, and when it expires (Unix seconds)."""
        expires = int(now if now is not None else time.time()) + self.seconds
        body = _b64(json.dumps({"key": key_name, "exp": expires}, separators=(",", ":")).encode())
        return f"{body}.{_b64(self._sign(self.secrets[0], body))}", expires

    def check(self, token: str, now: float | None = None) -> str:
        """The key name `token` stands for; BadToken when it is forged, mangled or expired."""
        body, _, signature = token.partition(".")
        try:
            sent = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
            if not any(hmac.compare_digest(sent, self._sign(s, body)) for s in self.secrets):
                raise ValueError("signature")
            claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            name, expires = claims["key"], claims["exp"]
            if not isinstance(name, str) or not isinstance(expires, int):
                raise ValueError("claims")
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise BadToken(
                f"This stream token is not one this API gave; ask for one with POST {TOKEN_PATH}."
            ) from None
        if expires <= (now if now is not None else time.time()):
            raise BadToken(
                f"This stream token has expired; ask for a new one with POST {TOKEN_PATH}."
            )
        return name

    @staticmethod
    def _sign(secret: bytes, body: str) -> bytes:
        return hmac.new(secret, body.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
