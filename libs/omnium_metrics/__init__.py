"""Prometheus metrics: a /metrics port per process, and what every service counts alike."""

from __future__ import annotations

from omnium_metrics._http import http_metrics
from omnium_metrics._pools import waiting, watch_pool
from omnium_metrics._serve import MetricsServer, serve_metrics

__all__ = ["MetricsServer", "http_metrics", "serve_metrics", "waiting", "watch_pool"]
