"""Compressed copies of a cached body, and which one a request's Accept-Encoding asks for."""

from __future__ import annotations

import asyncio
import gzip
import re

import brotli

IDENTITY = "identity"
GZIP = "gzip"
BROTLI = "br"
# Best first when a client accepts several with the same q: Brotli is the smaller.
_PREFERENCE = (BROTLI, GZIP)
_ETAG_SUFFIX = {GZIP: "-gz", BROTLI: "-br"}

# Fast levels: a live schedule is filled again every few seconds, and at these levels a 940 KB
# schedule takes a few milliseconds each (gzip 9 or Brotli 11 would take 20 ms and most of a
# second for a few kilobytes less).
GZIP_LEVEL = 6
BROTLI_QUALITY = 6
# Below this a compressed copy saves less than its own headers cost.
COMPRESS_FROM_BYTES = 256
# Above this the work goes to a thread (zlib and Brotli let go of the GIL), so one big fill
# does not hold up every other request of the worker.
THREAD_FROM_BYTES = 64 * 1024
# Distinct Accept-Encoding values remembered per worker; browsers send only a handful.
_MEMO_SIZE = 1024

_Q = re.compile(r"^q\s*=\s*([0-9](?:\.[0-9]{0,3})?)$")
_memo: dict[str, tuple[str, ...]] = {}


def _compress_now(body: bytes) -> tuple[bytes | None, bytes | None]:
    compressed_gzip = gzip.compress(body, GZIP_LEVEL, mtime=0)
    compressed_br = brotli.compress(body, quality=BROTLI_QUALITY, mode=brotli.MODE_TEXT)
    return (
        compressed_gzip if len(compressed_gzip) < len(body) else None,
        compressed_br if len(compressed_br) < len(body) else None,
    )


async def compress(body: bytes) -> tuple[bytes | None, bytes | None]:
    """(gzip, Brotli) of a body, each None when it would not be smaller."""
    if len(body) < COMPRESS_FROM_BYTES:
        return None, None
    if len(body) < THREAD_FROM_BYTES:
        return _compress_now(body)
    return await asyncio.to_thread(_compress_now, body)


def variant_etag(etag: str, coding: str) -> str:
    """The plain ETag with the coding's suffix inside the quotes: "abc" -> "abc-gz"."""
    if coding == IDENTITY:
        return etag
    return etag[:-1] + _ETAG_SUFFIX[coding] + '"'


def _parse(header: str) -> tuple[str, ...]:
    weights: dict[str, float] = {}
    for part in header.split(","):
        name, _, params = part.partition(";")
        coding = name.strip().lower()
        if not coding:
            continue
        q = 1.0
        for param in params.split(";"):
            found = _Q.match(param.strip().lower())
            if found is not None:
                q = min(float(found[1]), 1.0)
        if coding == "x-gzip":
            coding = GZIP
        weights[coding] = max(q, weights.get(coding, 0.0))
    star = weights.get("*")
    ranked: list[tuple[float, int, str]] = []
    for rank, coding in enumerate(_PREFERENCE):
        q = weights.get(coding, star if star is not None else 0.0)
        if q > 0:
            ranked.append((-q, rank, coding))
    # Identity is acceptable unless refused by name (or by "*;q=0" without naming it); named
    # with a q, it competes; unnamed, it comes after every coding the client named.
    identity = weights.get(IDENTITY)
    if identity is None and star != 0.0:
        ranked.append((0.0, len(_PREFERENCE), IDENTITY))
    elif identity is not None and identity > 0:
        ranked.append((-identity, len(_PREFERENCE), IDENTITY))
    return tuple(coding for *_, coding in sorted(ranked))


def acceptable(header: str | None) -> tuple[str, ...]:
    """The codings a request accepts, best first. With no header, or nothing acceptable, the
    answer is identity: a client is never refused for what it asked."""
    if not header:
        return (IDENTITY,)
    codings = _memo.get(header)
    if codings is None:
        codings = _parse(header) or (IDENTITY,)
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        _memo[header] = codings
    return codings
