"""Scout's doorbell: check the signature, queue a pull, answer at once. Never fetches here."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging

import asyncpg
from aiohttp import web
from asyncpg.exceptions import TargetServerAttributeNotMatched

from omnium_db import is_outage, pool_answers
from omnium_imports import _queue
from omnium_imports._scout import SCOUT_ID
from omnium_imports._sql import QUERIES
from omnium_metrics import http_metrics
from omnium_settings import Settings
from omnium_telemetry import aiohttp_middlewares

log = logging.getLogger(__name__)
POOL = web.AppKey("pool", asyncpg.Pool)
MAX_BYTES = web.AppKey("max_bytes", int)
SETTINGS = web.AppKey("settings", Settings)
STOPPING = web.AppKey("stopping", asyncio.Event)
HEADER = "X-Scout-Signature"
# Checked against when the integration is unknown, so an unknown code costs the same time as a
# wrong signature and the two answers cannot be told apart.
_NOBODY = b"\0" * 32
_UNAUTHORISED = {"error": "the signature did not match"}
# PostgreSQL down, restarting, failing over (a standby is read-only), full or refusing: the
# ring cannot be queued now, but can be later. So is whatever omnium_db counts as an outage (a
# connection lost mid-statement, as asyncpg words it). Any other error is a bug and keeps its
# traceback.
_DATABASE_DOWN = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError,
    asyncpg.ObjectNotInPrerequisiteStateError,
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.TransactionRollbackError,
    # Every host is up but none is the primary yet (a failover under way).
    TargetServerAttributeNotMatched,
)


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
    settings = request.app[SETTINGS]
    try:
        async with asyncio.timeout(settings.imports.doorbell_database_timeout_seconds):
            return await _queue_ring(request.app[POOL], code, body, request.headers.get(HEADER))
    except Exception as exc:
        if not (isinstance(exc, _DATABASE_DOWN) or is_outage(exc)):
            raise
        # One line, no traceback: an outage is not a bug, and Scout may ring many times.
        log.warning(
            "doorbell %s: the database did not answer (%s: %s); answered 503, nothing queued",
            code,
            type(exc).__name__,
            exc,
        )
        return web.json_response(
            {
                "queued": False,
                "error": "the database did not answer, so nothing was queued; ring again. "
                "If no ring gets through, the scheduler's next check of Scout picks this run "
                "up once the database is back.",
            },
            status=503,
            headers={"Retry-After": str(settings.imports.doorbell_retry_after_seconds)},
        )


async def _queue_ring(
    pool: asyncpg.Pool, code: str, body: bytes, signature: str | None
) -> web.Response:
    async with pool.acquire() as conn:
        integration = await conn.fetchrow(QUERIES["integration_by_code"], code)
        secrets = (
            [s for s in (integration["secret"], integration["previous_secret"]) if s]
            if integration is not None
            else []
        )
        if not signature_ok(body, signature, secrets) or integration is None:
            return web.json_response(_UNAUTHORISED, status=401)
        scout_run_id, problem = _run_named(body)
        if problem is not None:
            return web.json_response({"error": problem}, status=400)
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


def _run_named(body: bytes) -> tuple[str, str | None]:
    """The run id a ring names, or why the ring cannot be taken (the 400's words)."""
    try:
        ring_data = json.loads(body)
        scout_run_id = ring_data["run"]["id"]
        scout_job = ring_data["run"].get("job")
        if not isinstance(scout_run_id, str) or not scout_run_id:
            raise TypeError
    except (ValueError, KeyError, TypeError, AttributeError):
        return "", 'the body is not a doorbell: it needs {"run": {"id": "..."}, ...}'
    # The run id goes into the URL of our call to Scout: only an id of Scout's shape does.
    for name, value in (("run.id", scout_run_id), ("run.job", scout_job)):
        if value is not None and not (isinstance(value, str) and SCOUT_ID.match(value)):
            return "", (
                f"the doorbell's {name} {str(value)[:80]!r} is not a Scout id: use 1 to 64 "
                "letters, digits, _ or -, starting with a letter or digit. Nothing was queued."
            )
    return scout_run_id, None


def _answer(queued: bool, **fields: object) -> web.Response:
    return web.json_response({"queued": queued, **fields})


def doorbell_app(
    settings: Settings, pool: asyncpg.Pool, stopping: asyncio.Event
) -> web.Application:
    """`stopping` is the process's: set, the doorbell says it is not ready."""
    app = web.Application(
        client_max_size=settings.imports.doorbell_max_bytes,
        middlewares=[http_metrics("imports"), *aiohttp_middlewares(settings)],
    )
    app[POOL] = pool
    app[MAX_BYTES] = settings.imports.doorbell_max_bytes
    app[SETTINGS] = settings
    app[STOPPING] = stopping
    app.router.add_post("/doorbell/{integration_code}", ring)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


async def _healthz(request: web.Request) -> web.Response:
    """Alive: the process answers. A balancer asks /readyz."""
    return web.json_response({"ok": True})


async def _readyz(request: web.Request) -> web.Response:
    """Whether a balancer may send rings here: not once the copy is stopping (503)."""
    if request.app[STOPPING].is_set():
        return web.json_response(
            {
                "ready": False,
                "stopping": True,
                "reason": "this copy is stopping; the other copies answer the doorbell",
            },
            status=503,
        )
    # Every copy shares the one database: taking them all out of the balancer when it is down
    # would turn the doorbell's own 503 (with its reason and Retry-After) into a balancer's
    # bare one. So the copy stays ready and says what a ring gets now.
    if not await pool_answers(request.app[POOL]):
        return web.json_response(
            {
                "ready": True,
                "database": "down",
                "reason": "PostgreSQL did not answer within 1 s: a ring is answered 503 with "
                "Retry-After, and nothing is queued, until it does",
            }
        )
    return web.json_response({"ready": True, "database": "ok"})
