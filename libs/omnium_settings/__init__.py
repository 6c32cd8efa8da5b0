"""Typed settings for every omnium process, read once from OMNIUM_* variables over defaults."""

from __future__ import annotations

from omnium_settings._deploy import deploy_problems
from omnium_settings._errors import SettingsError
from omnium_settings._reference import settings_markdown
from omnium_settings._scoring import ScoringSettings
from omnium_settings._services import (
    AdminSettings,
    CommandSettings,
    DeliverySettings,
    GatewaySettings,
    ImportsSettings,
    LiveSettings,
)
from omnium_settings._settings import Settings, describe_settings
from omnium_settings._shared import (
    DatabaseSettings,
    DevSettings,
    GrpcSettings,
    ServerSettings,
    SignInSettings,
    TelemetrySettings,
)

__all__ = [
    "AdminSettings",
    "CommandSettings",
    "DatabaseSettings",
    "DeliverySettings",
    "DevSettings",
    "GatewaySettings",
    "GrpcSettings",
    "ImportsSettings",
    "LiveSettings",
    "ScoringSettings",
    "ServerSettings",
    "Settings",
    "SettingsError",
    "SignInSettings",
    "TelemetrySettings",
    "deploy_problems",
    "describe_settings",
    "settings_markdown",
]
