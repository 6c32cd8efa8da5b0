"""Calls to addresses people type in (client webhooks, Scout, the alert webhook): only to public
addresses unless an operator allows a range, answers read to a limit, URLs shown without secrets.

The address is checked where the connection is made (`GuardedBackend`), on the address the name
resolved to at that moment, so a name that resolves to a public address when it is saved and to
169.254.169.254 later (DNS rebinding) is still refused. `url_problem` says the same earlier, when
an operator saves a URL, in words they can act on.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from collections.abc import Iterable
from typing import TypeAlias
from urllib.parse import urlsplit

import httpcore
import httpx

from omnium_settings import Settings

__all__ = [
    "LOOPBACK",
    "AnswerTooLarge",
    "GuardedBackend",
    "OutboundRefused",
    "address_problem",
    "allowed_networks",
    "outbound_client",
    "read_limited",
    "redacted",
    "url_host",
    "url_problem",
]

Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

_SETTING = "OMNIUM_OUTBOUND_ALLOWED_NETWORKS"
#: What the dev stack and the tests allow: their receivers and Scout simulator are on this machine.
LOOPBACK = ("127.0.0.0/8", "::1/128")


class OutboundRefused(httpx.RequestError):
    """omnium will not call this address: it is not public and no operator allowed its range."""


class AnswerTooLarge(httpx.RequestError):
    """The answer was longer than omnium reads; the call counts as failed."""


@functools.cache
def _networks(cidrs: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def allowed_networks(settings: Settings) -> tuple[Network, ...]:
    """OMNIUM_OUTBOUND_ALLOWED_NETWORKS parsed once (Settings.check refused any that do not)."""
    return _networks(settings.server.outbound_allowed_networks)


# The first that fits names why an address is not public (is_private alone would also take in
# loopback and link-local, whose words tell an operator more).
_NOT_PUBLIC: tuple[tuple[str, str], ...] = (
    ("is_unspecified", "an unspecified address"),
    ("is_loopback", "a loopback address (this machine)"),
    ("is_link_local", "a link-local address (where cloud metadata answers)"),
    ("is_multicast", "a multicast address"),
    ("is_private", "a private address"),
)


def _kind(address: Address) -> str | None:
    """Why an address is not public, in words; None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _kind(address.ipv4_mapped)
    for test, words in _NOT_PUBLIC:
        if getattr(address, test):
            return words
    if not address.is_global:
        return "a reserved or shared address, not a public one"
    return None


def address_problem(address: str, allowed: Iterable[Network]) -> str | None:
    """Why omnium will not call this IP address, or None when it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone (fe80::1%eth0) is not the address
    kind = _kind(ip)
    if kind is None or any(ip in network for network in allowed):
        return None
    return (
        f"{ip} is {kind}; omnium calls only public addresses. If this receiver is meant to be "
        f"on your own network, an operator can allow its range in {_SETTING}."
    )


def url_host(url: str) -> str:
    """The host of a URL, for a log line that must not carry the rest (a secret may be in it)."""
    try:
        return urlsplit(url).hostname or "(no host)"
    except ValueError:
        return "(not a URL)"


def redacted(url: str) -> str:
    """The URL without what may be a secret: no user or password, and no query values."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(not a URL)"
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme}://{host}" + (f":{port}" if port else "") + parts.path
    return shown + ("?…" if parts.query else "")


def url_problem(url: object, settings: Settings, *, what: str) -> str | None:
    """Why omnium would not call this URL, said when an operator saves it; None when it may.

    The name is resolved now, so a receiver on a private network is named at once. A name that
    does not resolve yet is not refused here: the check made at each connection still applies.
    Resolving blocks: from async code, call this in a thread.
    """
    host, port = _host_port(url)
    if host is None or not isinstance(url, str):
        return f"{what} must be an http(s) URL like https://receiver.example.org"
    allowed = allowed_networks(settings)
    try:
        literal = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    else:
        problem = address_problem(str(literal), allowed)
        return None if problem is None else f"{what} {redacted(url)} was refused: {problem}"
    try:
        found = socket.getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    for *_, sockaddr in found:
        problem = address_problem(str(sockaddr[0]), allowed)
        if problem is not None:
            return f"{what} {redacted(url)} was refused: {host} resolves to {problem}"
    return None


def _host_port(url: object) -> tuple[str | None, int | None]:
    """The host and port of an http(s) URL; no host when it is not one."""
    if not isinstance(url, str):
        return None, None
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None, None
    if parts.scheme not in ("http", "https"):
        return None, None
    return host, port


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the address check: the name is resolved here and the
    connection made to the checked address itself, so nothing can resolve it differently between
    the check and the connect. TLS still checks the certificate against the name (httpcore gives
    start_tls the URL's host)."""

    def __init__(self, allowed: tuple[Network, ...]) -> None:
        self.allowed = allowed
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                found = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"{host} did not resolve within {timeout}s") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from None
        addresses = list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in found))
        usable = [a for a in addresses if address_problem(a, self.allowed) is None]
        if not usable:
            problem = address_problem(addresses[0], self.allowed) if addresses else None
            raise OutboundRefused(f"{host} was not called: {problem or 'it has no address'}")
        error: Exception | None = None
        for address in usable:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise OutboundRefused("omnium does not call Unix sockets for webhooks or Scout")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def outbound_client(
    settings: Settings, *, timeout: httpx.Timeout | float | None = 5.0
) -> httpx.AsyncClient:
    """An httpx client whose every connection goes through the address check.

    It follows no redirect (a receiver cannot send us on to an address of its choosing, and
    any address it would name is checked anyway), and reads no proxy from the environment."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    # httpx does not take a network backend, so its pool is made again with ours, as httpx
    # makes it (default limits, its SSL context).
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(allowed_networks(settings)),
    )
    return httpx.AsyncClient(
        transport=transport,
        follow_redirects=False,
        trust_env=False,
        timeout=timeout,
    )


async def read_limited(
    response: httpx.Response,
    limit: int,
    *,
    what: str,
    setting: str = "OMNIUM_OUTBOUND_ANSWER_MAX_BYTES",
) -> bytes:
    """The body of a streamed answer, read to `limit` bytes (the `setting`); past it,
    AnswerTooLarge."""
    declared = response.headers.get("content-length", "")
    too_large = AnswerTooLarge(
        f"{what} answered with more than {limit:,} bytes, more than omnium reads ({setting}); "
        "the call counts as failed."
    )
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)
