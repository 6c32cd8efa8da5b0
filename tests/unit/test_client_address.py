"""The real client address: X-Forwarded-For is believed only hop by hop from trusted proxies."""

from __future__ import annotations

import ipaddress

from omnium_process import nearest_untrusted

PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8"))


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    assert nearest_untrusted("203.0.113.9", ["198.51.100.1"], ()) == "203.0.113.9"


def test_a_stranger_cannot_pick_its_address_by_sending_the_header() -> None:
    assert nearest_untrusted("203.0.113.9", ["198.51.100.1"], PROXIES) == "203.0.113.9"


def test_behind_our_proxies_the_fan_is_the_nearest_untrusted_hop() -> None:
    # The fan wrote a fake first hop; our two proxies appended the real one and themselves.
    forwarded = ["1.2.3.4, 198.51.100.7", "10.0.0.5"]
    assert nearest_untrusted("10.0.0.6", forwarded, PROXIES) == "198.51.100.7"


def test_a_hop_that_is_not_an_address_ends_at_the_proxy_that_passed_it() -> None:
    assert nearest_untrusted("10.0.0.6", ["nonsense"], PROXIES) == "10.0.0.6"


def test_ipv6_proxies_are_walked_too() -> None:
    assert nearest_untrusted("fd00::1", ["2001:db8::7"], PROXIES) == "2001:db8::7"
