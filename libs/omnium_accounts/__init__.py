"""Who may use omnium: accounts with roles, slow password hashes on a bounded pool, throttled
sign-in, sessions bound to their console and audit events; scorers' assignments to matches;
and media clients' API keys."""

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
    SignInBusy,
    SignInRefused,
    SignInThrottled,
    check_password_rules,
    may_sign_in_on,
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
from omnium_accounts._audit import audit
from omnium_accounts._calls import CallSessions
from omnium_accounts._hashing import PasswordChecks, PasswordChecksBusy, password_checks
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
    "PasswordChecks",
    "PasswordChecksBusy",
    "RefusalView",
    "Role",
    "ScheduleError",
    "ScheduleLine",
    "Session",
    "SignInBusy",
    "SignInRefused",
    "SignInThrottled",
    "audit",
    "check_password_rules",
    "hash_key",
    "hash_password",
    "may_sign_in_on",
    "password_checks",
    "read_schedule",
    "verify_password",
]
