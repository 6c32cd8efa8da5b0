"""How a failure becomes a gRPC status, in one place (as httpx keeps its errors in one module).

Every method a GrpcServer serves is guarded (`_handlers.py`): whatever escapes the method is
answered here, so no servicer writes its own try/except for it.

- A refusal the caller can act on: raise `Refused` (INVALID_ARGUMENT: change the request) or
  `NotNow` (FAILED_PRECONDITION: the request is fine, the state is not), with a message that
  says what to do. Its text is the answer.
- An outage that passes by itself (the database restarting or failing over, another service or
  Scout away): UNAVAILABLE with a plain reason; `Unavailable` says which, and database outages are
  recognised by `omnium_db.is_outage`. Nothing of the exception's own text is sent.
- Anything else: INTERNAL with an incident id that is logged with the traceback; never the
  exception's text, which may name tables, hosts or data the caller must not see.
"""

from __future__ import annotations

import logging
import uuid
from typing import NoReturn

import grpc
from grpc import aio

from omnium_db import is_outage

DATABASE_AWAY = (
    "the database did not answer (it may be restarting or failing over); nothing was "
    "confirmed. Ask again in a few seconds."
)
SERVICE_AWAY = (
    "a service it needs did not answer in time; nothing was confirmed. Ask again in a few seconds."
)
# What another omnium service answered that means "away for now", not "wrong".
_AWAY_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class Refused(Exception):
    """A request the caller must change; the message says how (INVALID_ARGUMENT)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotNow(Refused):
    """A good request that the current state does not allow; the message says what would
    (FAILED_PRECONDITION)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(Exception):
    """Something the method needs is away for now (Scout, another service); the message says
    which, in plain words, and that asking again later is the cure (UNAVAILABLE)."""

    code = grpc.StatusCode.UNAVAILABLE


def status_of(exc: BaseException, what: str) -> tuple[grpc.StatusCode, str] | None:
    """The status and the caller's message for a failure we foresaw; None for the rest."""
    if isinstance(exc, Refused | Unavailable):
        return exc.code, str(exc)
    if isinstance(exc, aio.AioRpcError) and exc.code() in _AWAY_CODES:
        return grpc.StatusCode.UNAVAILABLE, f"{what}: {SERVICE_AWAY}"
    if is_outage(exc):
        return grpc.StatusCode.UNAVAILABLE, f"{what}: {DATABASE_AWAY}"
    return None


async def answer_failure(
    context: aio.ServicerContext, what: str, exc: BaseException, log: logging.Logger
) -> NoReturn:
    """Abort the call with the status `exc` calls for (see the module's docstring)."""
    found = status_of(exc, what)
    if found is not None:
        code, message = found
        if code is grpc.StatusCode.UNAVAILABLE:
            log.warning("%s (%r)", message, exc)
        else:
            log.info("%s: refused: %s", what, message)
        await context.abort(code, message)
    await abort_internal(context, what, exc, log)
    raise AssertionError("context.abort returned")  # pragma: no cover


async def abort_internal(
    context: aio.ServicerContext, what: str, exc: BaseException, log: logging.Logger
) -> NoReturn:
    """INTERNAL with an incident id; the traceback stays in our log."""
    incident = uuid.uuid4().hex[:12]
    log.exception("%s failed (incident %s)", what, incident, exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL,
        f"{what} failed on our side and nothing was confirmed; incident {incident} is logged. "
        "Send it again; if it fails again, tell the omnium team the incident number.",
    )
    raise AssertionError("context.abort returned")  # pragma: no cover
