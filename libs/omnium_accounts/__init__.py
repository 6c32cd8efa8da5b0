"""Accounts with roles, slow password hashes, sign-in that slows down, and sessions."""

from __future__ import annotations

from omnium_accounts._accounts import (
    ROLES,
    Account,
    AccountError,
    Accounts,
    AccountsUnavailable,
    AccountView,
    Role,
    Session,
    SignInRefused,
    check_password_rules,
)
from omnium_accounts._passwords import hash_password, verify_password

__all__ = [
    "ROLES",
    "Account",
    "AccountError",
    "AccountView",
    "Accounts",
    "AccountsUnavailable",
    "Role",
    "Session",
    "SignInRefused",
    "check_password_rules",
    "hash_password",
    "verify_password",
]
