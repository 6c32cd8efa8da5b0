"""Password hashes: argon2id at OWASP's parameters (argon2-cffi), with the cost stored in the hash.

Hashes made before (scrypt, N=2^14) are still checked, and `needs_rehash` says so: the account
gets an argon2id hash of the same password on its next good sign-in."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError

# OWASP's Password Storage Cheat Sheet, argon2id: 19 MiB, 2 passes, 1 lane. About 30 ms a check
# on one core of this class of machine: slow for a guesser, fine for a person signing in.
MEMORY_KIB = 19 * 1024
TIME_COST = 2
PARALLELISM = 1

_HASHER = PasswordHasher(
    time_cost=TIME_COST,
    memory_cost=MEMORY_KIB,
    parallelism=PARALLELISM,
    hash_len=32,
    salt_len=16,
    type=Type.ID,
)
# Hashes of the scrypt era: checked only, never made.
_SCRYPT_MAXMEM = 64 * 1024 * 1024


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def verify_password(password: str, stored: str) -> bool:
    if stored.startswith("scrypt$"):
        return _verify_scrypt(password, stored)
    try:
        return _HASHER.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(stored: str) -> bool:
    """True for a hash made another way or at other parameters than hash_password makes now."""
    if not stored.startswith("$argon2id$"):
        return True
    try:
        return _HASHER.check_needs_rehash(stored)
    except InvalidHashError:
        return True


def _verify_scrypt(password: str, stored: str) -> bool:
    try:
        _, n, r, p, salt, digest = stored.split("$")
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=_SCRYPT_MAXMEM,
            dklen=len(expected),
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, expected)


# Checked against when the login is unknown, so a wrong login costs as long as a wrong password.
DUMMY_HASH = hash_password(secrets.token_urlsafe(16))
