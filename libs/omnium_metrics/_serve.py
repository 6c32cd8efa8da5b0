"""The /metrics port: prometheus_client's own small HTTP server, on a thread of its own."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


@dataclass(slots=True)
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=1.0)


def serve_metrics(
    name: str, host: str, port: int, registry: Collector = REGISTRY
) -> MetricsServer | None:
    """Serve `registry` as Prometheus text on http://host:port/metrics; port 0 is off.

    A scrape is answered on its own thread, never on the service's event loop, so a slow
    scraper cannot hold up a call. A port that is taken is logged, not fatal: metrics must
    never stop the process that does the work (Prometheus shows the target down)."""
    if port == 0:
        return None
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.warning(
            "%s: metrics not served, port %s:%s could not be opened (%s); set the service's "
            "*_METRICS_PORT setting to a free port, or 0 for none",
            name,
            host,
            port,
            exc,
        )
        return None
    served = MetricsServer(server, thread)
    log.info("%s: metrics on http://%s:%s/metrics", name, host, served.port)
    return served
