"""The client's real address behind proxies: X-Forwarded-For, believed only from trusted ones."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence
from typing import TypeAlias

from aiohttp import web

from omnium_settings import Settings

Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.cache
def trusted_networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    """OMNIUM_TRUSTED_PROXIES parsed once (Settings.check has refused any that do not parse)."""
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in proxies)


def client_address(request: web.Request, settings: Settings) -> str:
    """The address a request came from: the nearest hop that is not one of our proxies.

    X-Forwarded-For is read from the right (the hop our own proxy added) and only while each hop
    is a trusted proxy, so a client cannot pick its address by sending the header itself. With no
    trusted proxies this is the connection's own address.
    """
    return nearest_untrusted(
        request.remote or "unknown",
        request.headers.getall("X-Forwarded-For", ()),
        trusted_networks(settings.server.trusted_proxies),
    )


def nearest_untrusted(remote: str, forwarded: Sequence[str], trusted: Sequence[Network]) -> str:
    """The first hop from the right (`remote` first) outside `trusted`; a hop that is not an
    address ends the walk at the proxy that passed it on."""
    if not trusted:
        return remote
    hops = [hop.strip() for header in forwarded for hop in header.split(",")]
    current = remote
    for hop in (remote, *reversed(hops)):
        hop_seen = _hop(hop, tuple(trusted))
        if hop_seen is None:
            return current
        current, is_trusted = hop_seen
        if not is_trusted:
            return current
    return current


@functools.lru_cache(maxsize=4096)
def _hop(hop: str, trusted: tuple[Network, ...]) -> tuple[str, bool] | None:
    """One hop as (its address written the standard way, whether it is one of our proxies), or
    None when it is not an address. Parsing an address and testing it against each network
    costs more than the rest of a refused request, and a flood sends the same few again and
    again; the cache is bounded, so an attacker cycling through addresses grows nothing."""
    try:
        address = ipaddress.ip_address(hop)
    except ValueError:
        return None
    return str(address), any(address in network for network in trusted)
