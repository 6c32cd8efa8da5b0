"""Random pushes at the provider door of a real gateway and scoring: none may answer 5xx."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from urllib.parse import quote
from xml.sax.saxutils import quoteattr

import asyncpg
import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.games import make_games
from tests.support.scoring import running_console
from tests.support.servers import Servers

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "odf_play_by_play.xml"
KEY = "test-odf-key"
# What a header value can carry (RFC 9110: visible, space, tab and obs-text 0x80-0xFF).
HEADER_BYTES = st.binary(max_size=80).map(
    lambda b: bytes(c for c in b if c == 9 or 32 <= c != 127).strip()
)
ENCODINGS = ("utf-8", "utf-16", "utf-16-le", "utf-16-be", "latin-1", "ascii", "shift_jis", "utf-32")


def _odf(draw: st.DrawFn, unit_code: str) -> bytes:
    """An ODF-shaped message with drawn values where a provider (or an attacker) puts them."""
    value = st.one_of(st.text(max_size=40), st.sampled_from(["1", "2", "0", "12", "-1", ""]))
    actions = []
    for _ in range(draw(st.integers(0, 4))):
        code = draw(st.one_of(st.sampled_from(["GOAL", "PERIOD_START", "RED_CARD"]), value))
        order = draw(value)
        extra = "".join(
            f"<Field Name={quoteattr(draw(value))} Value={quoteattr(draw(value))}/>"
            for _ in range(draw(st.integers(0, 2)))
        )
        actions.append(
            f"<Action Id={quoteattr(draw(value))} Action={quoteattr(code)} "
            f"Minute={quoteattr(draw(value))}><Competitor Code={quoteattr(draw(value))} "
            f"Order={quoteattr(order)}><Athlete Bib={quoteattr(draw(value))}/></Competitor>"
            f"{extra}</Action>"
        )
    document_code = draw(st.one_of(st.just(unit_code), value))
    competition = draw(st.one_of(st.just("AG2026"), value))
    doc_type = draw(st.one_of(st.just("DT_PLAY_BY_PLAY"), value))
    dtd = draw(
        st.sampled_from(
            [
                "",
                '<!DOCTYPE OdfBody [<!ENTITY a "GOAL">]>',
                '<!DOCTYPE OdfBody SYSTEM "http://127.0.0.1:9/x.dtd">',
                '<!DOCTYPE OdfBody [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>',
            ]
        )
    )
    encoding = draw(st.sampled_from(ENCODINGS))
    text = (
        f'<?xml version="1.0" encoding="{encoding}"?>{dtd}'
        f"<OdfBody CompetitionCode={quoteattr(competition)} "
        f"DocumentCode={quoteattr(document_code)} DocumentType={quoteattr(doc_type)}>"
        f"<Competition><Actions>{''.join(actions)}</Actions></Competition></OdfBody>"
    )
    return text.encode(encoding, errors="replace")


@st.composite
def pushes(draw: st.DrawFn, unit_code: str) -> tuple[str, list[tuple[bytes, bytes]], bytes]:
    """(path, headers, body) of one push."""
    # Most pushes come with the provider's code and key, so most reach scoring's reading.
    if draw(st.integers(0, 3)):
        provider, key = "odf-fbl", KEY.encode()
    else:
        provider = draw(
            st.one_of(
                st.sampled_from(["odf-fbl", "odf-pull", "nobody", "ODF-FBL", "..", "a"]),
                st.text(min_size=1, max_size=60),
            )
        )
        key = draw(st.one_of(st.just(KEY.encode()), st.just(b""), HEADER_BYTES))
    headers: list[tuple[bytes, bytes]] = []
    if key or draw(st.booleans()):
        headers.append((b"X-Api-Key", key))
    content_type = draw(
        st.one_of(
            st.sampled_from([b"application/xml", b"text/xml; charset=utf-16", b"", b"a/b;;;="]),
            HEADER_BYTES,
        )
    )
    if content_type:
        headers.append((b"Content-Type", content_type))
    if draw(st.booleans()):
        headers.append((b"X-Forwarded-For", draw(HEADER_BYTES)))
    kind = draw(st.sampled_from(["odf", "odf", "sample", "bytes", "text", "empty"]))
    if kind == "odf":
        body = _odf(draw, unit_code)
    elif kind == "sample":
        body = SAMPLE.read_text().replace("{unit_code}", unit_code).encode()
    elif kind == "bytes":
        body = draw(st.binary(max_size=3000))
    elif kind == "text":
        body = draw(st.text(max_size=500)).encode("utf-8", "surrogatepass")
    else:
        body = b""
    return f"/v1/providers/{quote(provider, safe='')}/messages", headers, body


async def test_random_pushes_never_answer_5xx(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    unit_code = games.unit_codes[games.units[0]]
    answered: list[int] = []
    async with running_console(
        database_url,
        servers.redis_url,
        gateway_redis_prefix=f"test:{uuid.uuid4().hex[:10]}:",
        # Room for every push to reach the parts behind the limits.
        provider_burst=100_000,
        provider_rate_per_second=1_000.0,
        provider_wrong_key_burst=100_000,
        provider_wrong_key_per_minute=60_000.0,
    ) as site:

        @settings(
            max_examples=200,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(push=pushes(unit_code))
        @example(
            push=(
                "/v1/providers/odf-fbl/messages",
                [(b"X-Api-Key", KEY.encode()), (b"Content-Type", b"application/xml")],
                SAMPLE.read_text().replace("{unit_code}", unit_code).encode(),
            )
        )
        def push_once(push: tuple[str, list[tuple[bytes, bytes]], bytes]) -> None:
            path, headers, body = push
            with httpx.Client(base_url=site.url, timeout=60) as http:
                answer = http.post(path, headers=headers, content=body)
            answered.append(answer.status_code)
            assert answer.status_code < 500, (path, headers, body[:200], answer.text)
            assert answer.headers["Content-Type"].startswith("application/json"), (
                path,
                headers,
                body[:200],
                answer.status_code,
                answer.text,
            )

        # The gateway runs on this loop; the examples wait on it from a thread of their own.
        await asyncio.to_thread(push_once)
    assert len(answered) >= 200
    # The examples reached past the door, not only its refusals.
    assert {200, 400, 401} <= set(answered)
