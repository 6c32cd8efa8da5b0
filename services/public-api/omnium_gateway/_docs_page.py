"""The OpenAPI document as a page a person reads: Redoc, pinned by npm's lock file and served
from here (never a CDN), under a Content-Security-Policy that allows what it needs; `/` leads
a browser to it, and `/favicon.ico` answers without a JSON 404."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from omnium_gateway._encoding import IDENTITY, acceptable, compress, variant_etag
from omnium_gateway._gateway import error_answer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# `make install` runs `npm ci` in services/public-api/docs-page and copies Redoc's standalone
# bundle here; the image gets it with the package's other files.
BUNDLE = Path(__file__).resolve().parent / "static" / "redoc.standalone.js"
BUNDLE_PATH = "/v1/docs/redoc.standalone.js"
BUNDLE_MAX_AGE_SECONDS = 3600

# Relative addresses, so the page also works behind a proxy that serves the API under a prefix.
PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>omnium public API</title>
</head>
<body>
<redoc spec-url="openapi.json"></redoc>
<script src="docs/redoc.standalone.js"></script>
</body>
</html>
"""

# Redoc's bundle: its own script, inline styles (styled-components), its search in a worker it
# makes from a blob, the document fetched from here, its icons as data: images. Nothing else:
# its "API docs by Redocly" badge, an image on Redocly's CDN, is refused.
CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'unsafe-inline'",
        "img-src data:",
        "connect-src 'self'",
        "worker-src blob:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
_PAGE_HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True, slots=True)
class _Bundle:
    etag: str
    bodies: dict[str, bytes]  # by content coding


class DocsPage:
    """The page, Redoc's bundle (read and compressed once), `/` and `/favicon.ico`."""

    def __init__(self, bundle: Path | None = None) -> None:
        self.bundle = bundle or BUNDLE
        self._loaded: asyncio.Future[_Bundle | None] | None = None

    async def _load(self) -> _Bundle | None:
        try:
            body = await asyncio.to_thread(self.bundle.read_bytes)
        except FileNotFoundError:
            return None
        gzip_body, brotli_body = await compress(body)
        bodies = {IDENTITY: body}
        if gzip_body is not None:
            bodies["gzip"] = gzip_body
        if brotli_body is not None:
            bodies["br"] = brotli_body
        return _Bundle('"' + hashlib.sha256(body).hexdigest()[:32] + '"', bodies)

    async def loaded(self) -> _Bundle | None:
        if self._loaded is None:
            self._loaded = asyncio.ensure_future(self._load())
        found = await asyncio.shield(self._loaded)
        if found is None:
            self._loaded = None  # look again next time: `make install` may have run since
        return found

    async def page(self, request: web.Request) -> web.StreamResponse:
        del request
        return web.Response(body=PAGE, headers=_PAGE_HEADERS)

    async def script(self, request: web.Request) -> web.StreamResponse:
        found = await self.loaded()
        if found is None:
            return error_answer(
                503,
                "The docs page's script is not installed on this gateway: run `make install` "
                "(npm ci in services/public-api/docs-page).",
            )
        codings = acceptable(request.headers.get("Accept-Encoding"))
        coding = next((c for c in codings if c in found.bodies), IDENTITY)
        etag = variant_etag(found.etag, coding)
        headers = {
            "Content-Type": "text/javascript; charset=utf-8",
            "Cache-Control": f"public, max-age={BUNDLE_MAX_AGE_SECONDS}",
            "ETag": etag,
            "Vary": "Accept-Encoding",
            "X-Content-Type-Options": "nosniff",
        }
        if coding != IDENTITY:
            headers["Content-Encoding"] = coding
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=found.bodies[coding], headers=headers)

    async def home(self, request: web.Request) -> web.StreamResponse:
        del request
        return web.Response(status=302, headers={"Location": "v1/docs"})

    async def favicon(self, request: web.Request) -> web.StreamResponse:
        del request
        # No icon of its own: an empty answer a browser caches, rather than a JSON 404.
        return web.Response(status=204, headers={"Cache-Control": "public, max-age=86400"})

    def routes(self) -> list[tuple[str, str, Handler]]:
        return [
            ("docs", "/v1/docs", self.page),
            ("docs", BUNDLE_PATH, self.script),
            ("home", "/", self.home),
            ("favicon", "/favicon.ico", self.favicon),
        ]
