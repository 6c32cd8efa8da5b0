"""Scout's doorbell: check the signature, queue a pull, answer at once. Never fetches here."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

import asyncpg
from aiohttp import web

from omnium_imports import _queue
from omnium_imports._sql import QUERIES
from omnium_settings import Settings
from omnium_telemetry import aiohttp_middlewares

log = logging.getLogger(__name__)
POOL = web.AppKey("pool", asyncpg.Pool)
MAX_BYTES = web.AppKey("max_bytes", int)
HEADER = "X-Scout-Signature"
# Checked against when the integration is unknown, so an unknown code costs the same time as a
# wrong signature and the two answers cannot be told apart.
_NOBODY = b"\0" * 32
_UNAUTHORISED = {"error": "the signature did not match"}


def signature_ok(body: bytes, header: str | None, secrets: list[str]) -> bool:
    """HMAC-SHA256 of the exact body against `sha256=<hex>`, in constant time, any secret."""
    given = (header or "").strip()
    scheme, _, digest = given.partition("=")
    matched = False
    for secret in secrets or [_NOBODY.decode()]:
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        matched |= hmac.compare_digest(digest.encode(), expected.encode())
    return matched and scheme == "sha256" and bool(secrets)


async def ring(request: web.Request) -> web.Response:
    code = request.match_info["integration_code"]
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return web.json_response(
            {"error": f"the doorbell body is over {request.app[MAX_BYTES]:,} bytes"}, status=413
        )
    pool = request.app[POOL]
    async with pool.acquire() as conn:
        integration = await conn.fetchrow(QUERIES["integration_by_code"], code)
        secrets = (
            [s for s in (integration["secret"], integration["previous_secret"]) if s]
            if integration is not None
            else []
        )
        if not signature_ok(body, request.headers.get(HEADER), secrets) or integration is None:
            return web.json_response(_UNAUTHORISED, status=401)
        try:
            ring_data = json.loads(body)
            scout_run_id = ring_data["run"]["id"]
            if not isinstance(scout_run_id, str) or not scout_run_id:
                raise TypeError
        except (ValueError, KeyError, TypeError):
            return web.json_response(
                {"error": 'the body is not a doorbell: it needs {"run": {"id": "..."}, ...}'},
                status=400,
            )
        await conn.execute(QUERIES["heard"], integration["id"])
        if integration["state"] != "on":
            return _answer(False, reason=f"the integration is {integration['state']}")
        if await conn.fetchval(QUERIES["run_known"], integration["id"], scout_run_id):
            return _answer(False, reason=f"run {scout_run_id} is already known")
        job_id = await _queue.enqueue_pull(conn, integration["id"], scout_run_id)
    if job_id is None:
        return _answer(False, reason=f"run {scout_run_id} is already queued")
    log.info("doorbell %s: run %s queued as job %s", code, scout_run_id, job_id)
    return _answer(True, job=job_id)


def _answer(queued: bool, **fields: Any) -> web.Response:
    return web.json_response({"queued": queued, **fields})


def doorbell_app(settings: Settings, pool: asyncpg.Pool) -> web.Application:
    app = web.Application(
        client_max_size=settings.doorbell_max_bytes, middlewares=aiohttp_middlewares(settings)
    )
    app[POOL] = pool
    app[MAX_BYTES] = settings.doorbell_max_bytes
    app.router.add_post("/doorbell/{integration_code}", ring)
    app.router.add_get("/healthz", _healthz)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})
