"""An OTLP/HTTP trace receiver of the suite's own: it takes what OpenTelemetry's exporters POST to /v1/traces and
decodes it with opentelemetry-proto (not with the SDK that sent it)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import text_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.servers import serve_in_thread


@dataclass
class Received:
    """One span as it arrived: its service, the span, and the whole of it as text (resource and scope included)."""

    service: str
    span: Any
    text: str

    @property
    def trace_id(self) -> str:
        return bytes(self.span.trace_id).hex()

    @property
    def span_id(self) -> str:
        return bytes(self.span.span_id).hex()

    @property
    def parent_id(self) -> str:
        return bytes(self.span.parent_span_id).hex()

    def attribute(self, key: str) -> Any:
        for kv in self.span.attributes:
            if kv.key == key:
                value = kv.value
                return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
        return None


@dataclass
class Receiver:
    """Serves POST /v1/traces on 127.0.0.1 (a port the system hands out) until close()."""

    spans: list[Received] = field(default_factory=list)
    requests: int = 0

    def __post_init__(self) -> None:
        receiver = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with lock:
                    receiver.requests += 1
                    for resource_spans in request.resource_spans:
                        resource = text_format.MessageToString(resource_spans.resource)
                        service = next(
                            (
                                a.value.string_value
                                for a in resource_spans.resource.attributes
                                if a.key == "service.name"
                            ),
                            "",
                        )
                        for scope_spans in resource_spans.scope_spans:
                            scope = text_format.MessageToString(scope_spans.scope)
                            for span in scope_spans.spans:
                                text = resource + scope + text_format.MessageToString(span)
                                receiver.spans.append(Received(service, span, text))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = serve_in_thread(self.server, "otlp-collector")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def trace(self, trace_id: str) -> list[Received]:
        return [s for s in list(self.spans) if s.trace_id == trace_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
