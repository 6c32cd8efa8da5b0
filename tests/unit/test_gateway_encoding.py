"""Accept-Encoding as the gateway reads it: q-values, aliases, and identity as the last resort."""

from __future__ import annotations

import pytest

from omnium_gateway._encoding import acceptable, variant_etag


@pytest.mark.parametrize(
    ("header", "best"),
    [
        (None, ("identity",)),
        ("", ("identity",)),
        ("gzip, deflate, br", ("br", "gzip", "identity")),
        ("gzip;q=1.0, br;q=0.5", ("gzip", "br", "identity")),
        ("br;q=0, gzip", ("gzip", "identity")),
        ("GZIP ; Q=0.3", ("gzip", "identity")),
        ("x-gzip", ("gzip", "identity")),
        ("*", ("br", "gzip", "identity")),
        ("*;q=0", ("identity",)),  # nothing acceptable: the plain body, never a 406
        ("identity;q=1, br;q=0.9", ("identity", "br")),
        ("gzip;q=0, br;q=0, identity;q=0", ("identity",)),
        ("br;q=0.001", ("br", "identity")),
        ("br;q=bogus", ("br", "identity")),
        ("compress", ("identity",)),
    ],
)
def test_codings_best_first(header: str | None, best: tuple[str, ...]) -> None:
    assert acceptable(header) == best


def test_variant_etags_keep_the_quotes() -> None:
    assert variant_etag('"abc"', "gzip") == '"abc-gz"'
    assert variant_etag('"abc"', "br") == '"abc-br"'
    assert variant_etag('"abc"', "identity") == '"abc"'
