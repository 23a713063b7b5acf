"""OtlpReceiver: a real OTLP/HTTP traces receiver on loopback, for tests of exported spans.

It accepts what an OpenTelemetry exporter sends to ``POST /v1/traces`` (binary protobuf,
``application/x-protobuf``, optionally gzip-compressed), decodes it with the official
protobuf definitions (``opentelemetry-proto``'s ``ExportTraceServiceRequest``) and keeps
every span, answering ``200`` with an empty ``ExportTraceServiceResponse`` as a collector
does. JSON-encoded OTLP is refused (415): the gateway's exporter speaks protobuf.
"""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind is not None else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids in lower-case hex)."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status: str
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""


class OtlpReceiver:
    """An OTLP/HTTP receiver on ``127.0.0.1`` at a free port (``endpoint`` once started).

    Use as a context manager, or :meth:`start` and :meth:`stop`. :attr:`spans` is every
    span received so far; :meth:`wait_for` blocks until a condition on them holds.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._spans: list[ReceivedSpan] = []
        self.requests = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The traces URL an exporter is given (``http://127.0.0.1:<port>/v1/traces``)."""
        if self._server is None:
            raise RuntimeError("the receiver is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    @property
    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in arrival order."""
        with self._lock:
            return list(self._spans)

    def _accept(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=_KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status=_STATUS.get(span.status.code, str(span.status.code)),
                            resource=resource,
                            scope=scope_spans.scope.name,
                        )
                    )
        with self._lock:
            self.requests += 1
            self._spans.extend(received)
            self._lock.notify_all()

    def wait_for(
        self, condition: Callable[[list[ReceivedSpan]], bool], timeout: float = 20.0
    ) -> list[ReceivedSpan]:
        """Block until ``condition(spans)`` holds; the spans then.

        Raises:
            TimeoutError: it did not hold within ``timeout`` seconds.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: condition(list(self._spans)), timeout):
                raise TimeoutError(f"spans received: {[s.name for s in self._spans]}")
            return list(self._spans)

    def start(self) -> Self:
        """Listen on a free loopback port, in a daemon thread."""
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                if self.headers.get("content-type") != "application/x-protobuf":
                    self.send_error(415)
                    return
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                try:
                    receiver._accept(body)
                except Exception:  # noqa: BLE001 - a body that does not decode is refused
                    self.send_error(400)
                    return
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
