"""The scoring service: sport rules from files, scorers' actions and provider feeds, via command."""

from __future__ import annotations

from omnium_scoring._app import ScoringApp
from omnium_scoring._providers import (
    PROVIDERS_DIR,
    MessageRefused,
    MessageUnreadable,
    ProviderFileError,
    Providers,
    ProviderSpec,
    load_provider_file,
    parse_odf,
    read_xml,
)
from omnium_scoring._scorer import Scorer

__all__ = [
    "PROVIDERS_DIR",
    "MessageRefused",
    "MessageUnreadable",
    "ProviderFileError",
    "ProviderSpec",
    "Providers",
    "Scorer",
    "ScoringApp",
    "load_provider_file",
    "parse_odf",
    "read_xml",
]
