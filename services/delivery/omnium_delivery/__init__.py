"""The delivery service: client feeds over SFTP and signed webhooks, and live push."""

from __future__ import annotations

from omnium_delivery._app import HAND_OVER_SECONDS, DeliveryApp
from omnium_delivery._clients import check_client, load_clients, read_clients_file
from omnium_delivery._documents import Document, render
from omnium_delivery._transport import ClientSettingsError, Outgoing, SendResult, Sent
from omnium_delivery._webhook import secret_key, sign

__all__ = [
    "HAND_OVER_SECONDS",
    "ClientSettingsError",
    "DeliveryApp",
    "Document",
    "Outgoing",
    "SendResult",
    "Sent",
    "check_client",
    "load_clients",
    "read_clients_file",
    "render",
    "secret_key",
    "sign",
]
