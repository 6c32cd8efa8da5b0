"""An IPv6 address that carries an IPv4 one (mapped, NAT64, 6to4...) is judged by that IPv4 one.

64:ff9b::a9fe:a9fe is cloud metadata once a NAT64 gateway passes it on. The address rule is
checked directly; the connect path through a real HTTP server on loopback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from aiohttp import web

from omnium_outbound import OutboundRefused, address_problem, allowed_networks, outbound_client
from omnium_settings import Settings

ONLY_127_0_0_1 = ("127.0.0.1/32",)
LINK_LOCAL = ("169.254.0.0/16",)


@pytest.mark.parametrize(
    ("address", "carried", "words"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "169.254.169.254", "link-local"),
        ("::ffff:10.0.0.7", "10.0.0.7", "private"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254", "link-local"),  # NAT64 of cloud metadata
        ("64:ff9b::7f00:1", "127.0.0.1", "loopback"),
        ("64:ff9b::c0a8:101", "192.168.1.1", "private"),
        ("2002:a9fe:a9fe::", "169.254.169.254", "link-local"),  # 6to4
        ("2002:7f00:1::1", "127.0.0.1", "loopback"),
        ("::ffff:0:a9fe:a9fe", "169.254.169.254", "link-local"),  # IPv4-translated (SIIT)
        ("::a9fe:a9fe", "169.254.169.254", "link-local"),  # IPv4-compatible (deprecated)
    ],
)
def test_an_ipv6_address_carrying_a_non_public_ipv4_one_is_refused_in_its_words(
    address: str, carried: str, words: str
) -> None:
    problem = address_problem(address, ())
    assert problem is not None, f"{address} carries {carried} and must be refused"
    assert f"carries {carried}, which is" in problem
    assert words in problem
    assert "OMNIUM_OUTBOUND_ALLOWED_NETWORKS" in problem


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("::ffff:127.0.0.1", ONLY_127_0_0_1),
        ("64:ff9b::7f00:1", ONLY_127_0_0_1),
        ("2002:a9fe:a9fe::", LINK_LOCAL),
        ("64:ff9b::a9fe:a9fe", LINK_LOCAL),
    ],
)
def test_an_ipv6_address_is_allowed_when_the_ipv4_range_it_carries_is(
    address: str, allowed: tuple[str, ...]
) -> None:
    settings = Settings.from_env({}, outbound_allowed_networks=allowed)
    assert address_problem(address, allowed_networks(settings)) is None


def test_an_allowed_ipv4_range_does_not_allow_what_another_ipv4_address_carries() -> None:
    # 127.0.0.1 allowed says nothing about 169.254.169.254, however it is written.
    allowed = allowed_networks(Settings.from_env({}, outbound_allowed_networks=ONLY_127_0_0_1))
    for address in ("::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::"):
        assert address_problem(address, allowed) is not None


@pytest.mark.parametrize(
    "address", ["64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8", "2606:4700::1111"]
)
def test_addresses_carrying_a_public_ipv4_one_and_plain_public_ones_are_called(
    address: str,
) -> None:
    assert address_problem(address, ()) is None


def test_ipv6_loopback_and_unspecified_keep_their_own_words() -> None:
    # :: and ::1 sit in the IPv4-compatible range but are IPv6's own, not 0.0.0.0 and 0.0.0.1.
    assert "loopback" in (address_problem("::1", ()) or "")
    assert "unspecified" in (address_problem("::", ()) or "")
    assert address_problem("::1", allowed_networks(Settings.from_env({}))) is not None


def test_a_local_use_nat64_address_is_not_taken_for_public() -> None:
    problem = address_problem("64:ff9b:1::a9fe:a9fe", ())
    assert problem is not None
    assert "NAT64" in problem


# -- the real connect path -------------------------------------------------------------------------


@asynccontextmanager
async def loopback_server() -> AsyncIterator[int]:
    """A real aiohttp server on 127.0.0.1 (IPv4 only); yields its port."""

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_a_mapped_loopback_url_is_refused_at_connect_unless_loopback_is_allowed() -> None:
    async with loopback_server() as port:
        url = f"http://[::ffff:127.0.0.1]:{port}/"
        refusing = outbound_client(Settings.from_env({}, outbound_allowed_networks=()))
        async with refusing:
            with pytest.raises(OutboundRefused, match=r"carries 127\.0\.0\.1"):
                await refusing.get(url)
        # Allowing 127.0.0.1 allows the same receiver written as an IPv4-mapped address.
        allowing = outbound_client(Settings.from_env({}, outbound_allowed_networks=ONLY_127_0_0_1))
        async with allowing:
            answer = await allowing.get(url)
        assert answer.status_code == 200
        assert answer.text == "hello"


async def test_nat64_cloud_metadata_is_refused_before_any_connection() -> None:
    # Before the fix this address counted as public and a connection was tried (and failed or
    # timed out); now no connection is made at all.
    client = outbound_client(
        Settings.from_env({}, outbound_allowed_networks=ONLY_127_0_0_1), timeout=2.0
    )
    async with client:
        for url in ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", "http://[2002:a9fe:a9fe::]/"):
            with pytest.raises(OutboundRefused, match=r"carries 169\.254\.169\.254") as refused:
                await client.get(url)
            assert isinstance(refused.value, httpx.RequestError)
