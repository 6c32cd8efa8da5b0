"""Password hashes: scrypt from the standard library, slow on purpose, with the cost stored."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

# 16 MiB and ~50 ms per check on this class of machine: slow for a guesser, fine for a person.
_N, _R, _P = 2**14, 8, 1
_MAXMEM = 64 * 1024 * 1024


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, maxmem=_MAXMEM)
    return "$".join(("scrypt", str(_N), str(_R), str(_P), _b64(salt), _b64(digest)))


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=_MAXMEM,
            dklen=len(expected),
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, expected)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# Checked against when the login is unknown, so a wrong login costs as long as a wrong password.
DUMMY_HASH = hash_password(secrets.token_urlsafe(16))
