"""The tests' TLS: the private CA and certificates of omnium_devstack.tls, which the image run
(dev/image.py) shares."""

from __future__ import annotations

from omnium_devstack.tls import Tls, make_tls

__all__ = ["Tls", "make_tls"]
