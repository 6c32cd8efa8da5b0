"""The answer to a failure nobody foresaw: a plain message and a reference, never a traceback."""

from __future__ import annotations

import logging
import uuid

import grpc
from grpc import aio


async def abort_internal(
    context: aio.ServicerContext, what: str, exc: BaseException, log: logging.Logger
) -> None:
    # The caller gets a plain message and a reference; the traceback stays in our log.
    incident = uuid.uuid4().hex[:12]
    log.exception("%s failed (incident %s)", what, incident, exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL,
        f"{what} failed on our side and nothing was confirmed; incident {incident} is logged. "
        "Send it again; if it fails again, tell the omnium team the incident number.",
    )
