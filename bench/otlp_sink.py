"""An OTLP/gRPC trace sink for the benchmarks: takes every export, counts its spans, keeps none.

The benchmarks measure omnium with tracing on as it runs in production (spans batched and
exported over OTLP), without a collector's own CPU in the figures. Prints `ready` once it
listens and `spans <n>` when it is stopped (SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import TextIO

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, out: TextIO | None) -> None:
        self.spans = 0
        self.lock = threading.Lock()
        self.out = out

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        count = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with self.lock:
            self.spans += count
            if self.out is not None:
                for resource in request.resource_spans:
                    service = next(
                        (a.value.string_value for a in resource.resource.attributes
                         if a.key == "service.name"),
                        "?",
                    )  # fmt: skip
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            self.out.write(
                                json.dumps(
                                    {
                                        "service": service,
                                        "name": span.name,
                                        "trace": span.trace_id.hex(),
                                        "span": span.span_id.hex(),
                                        "parent": span.parent_span_id.hex(),
                                        "start": span.start_time_unix_nano / 1e9,
                                        "end": span.end_time_unix_nano / 1e9,
                                    }
                                )
                                + "\n"
                            )
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, help="write each span here, one JSON line each")
    args = parser.parse_args()
    out = args.out.open("w") if args.out else None
    sink = Sink(out)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    print("ready", flush=True)
    stopped.wait()
    server.stop(1).wait()
    if out is not None:
        out.close()
    print(f"spans {sink.spans}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
