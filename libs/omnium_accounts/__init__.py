"""Who may use omnium: accounts with roles, slow password hashes, sign-in that slows down and
sessions; scorers' assignments to matches; and media clients' API keys."""

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
from omnium_accounts._api_keys import ApiKeys, ApiKeyView, LiveKey, hash_key
from omnium_accounts._assignments import (
    Assignments,
    AssignmentView,
    RefusalView,
    ScheduleError,
    ScheduleLine,
    read_schedule,
)
from omnium_accounts._calls import CallSessions
from omnium_accounts._passwords import hash_password, verify_password

__all__ = [
    "ROLES",
    "Account",
    "AccountError",
    "AccountView",
    "Accounts",
    "AccountsUnavailable",
    "ApiKeyView",
    "ApiKeys",
    "AssignmentView",
    "Assignments",
    "CallSessions",
    "LiveKey",
    "RefusalView",
    "Role",
    "ScheduleError",
    "ScheduleLine",
    "Session",
    "SignInRefused",
    "check_password_rules",
    "hash_key",
    "hash_password",
    "read_schedule",
    "verify_password",
]
