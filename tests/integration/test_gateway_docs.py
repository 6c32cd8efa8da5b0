"""The docs page's answers over HTTP: the page and its CSP, Redoc's bundle (compressed, cached,
304), `/` and `/favicon.ico` for a browser, and a clear answer when the bundle is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from omnium_gateway import _docs_page
from tests.support.gateway import running_gateway
from tests.support.servers import Servers


async def test_the_page_its_script_home_and_favicon(database_url: str, servers: Servers) -> None:
    bundle = _docs_page.BUNDLE.read_bytes()
    async with running_gateway(database_url, servers.redis_url) as gw:
        page = await gw.get("/v1/docs")
        assert page.status_code == 200
        assert page.headers["Content-Type"].startswith("text/html")
        csp = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert '<script src="docs/redoc.standalone.js">' in page.text
        plain = await gw.get(_docs_page.BUNDLE_PATH, headers={"Accept-Encoding": "identity"})
        assert plain.status_code == 200 and plain.content == bundle
        assert plain.headers["Content-Type"].startswith("text/javascript")
        br = await gw.get(_docs_page.BUNDLE_PATH, headers={"Accept-Encoding": "br"})
        assert br.headers["Content-Encoding"] == "br"
        # httpx decodes the body; what came over the wire is the compressed copy.
        assert br.content == bundle and br.num_bytes_downloaded < len(bundle) // 3
        gz = await gw.get(_docs_page.BUNDLE_PATH, headers={"Accept-Encoding": "gzip"})
        assert gz.headers["Content-Encoding"] == "gzip"
        assert gz.content == bundle and gz.num_bytes_downloaded < len(bundle) // 2
        again = await gw.get(
            _docs_page.BUNDLE_PATH,
            headers={"Accept-Encoding": "gzip", "If-None-Match": gz.headers["ETag"]},
        )
        assert again.status_code == 304 and again.content == b""
        home = await gw.get("/", headers={"Accept": "text/html"})
        assert home.status_code == 302 and home.headers["Location"] == "v1/docs"
        icon = await gw.get("/favicon.ico")
        assert icon.status_code == 204 and "max-age" in icon.headers["Cache-Control"]
        # Only GET: anything else at these addresses is a 405, like the other core routes.
        posted = await gw.http.post("/")
        assert posted.status_code == 405


async def test_a_missing_bundle_says_how_to_install_it(
    database_url: str, servers: Servers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_docs_page, "BUNDLE", tmp_path / "absent.js")
    async with running_gateway(database_url, servers.redis_url) as gw:
        answer = await gw.get(_docs_page.BUNDLE_PATH)
        assert answer.status_code == 503
        assert "make install" in answer.json()["error"]
        # The page itself still answers: it is the script that is missing.
        assert (await gw.get("/v1/docs")).status_code == 200
