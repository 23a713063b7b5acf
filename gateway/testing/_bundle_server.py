"""A real OPA-style bundle server on loopback, for tests of bundle polling."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class BundleServer:
    """An HTTP bundle server on 127.0.0.1, the way OPA's bundle plugin expects one.

    ``GET`` of :attr:`url` answers the bundle set with :meth:`serve` and its ETag, ``304``
    when ``If-None-Match`` carries that ETag, or the status set with :meth:`fail`. Every
    request's headers are kept (:attr:`requests`, as it arrives), and :meth:`wait_for_requests`
    waits until a number of them have been answered, which is how a test knows a poller has
    been round without timing it.
    With ``drip_s`` set, the body is sent ``drip_bytes`` at a time, ``drip_s`` apart;
    :meth:`redirect` sends every request elsewhere.
    """

    def __init__(self, path: str = "/bundles/gateway.tar.gz") -> None:
        self.body = b""
        self.etag = '"0"'
        self.status = 200
        self.drip_s: float | None = None
        self.drip_bytes = 1
        self.location: str | None = None
        self.requests: list[Mapping[str, str]] = []
        self.answered = 0
        self._changed = threading.Condition()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with owner._changed:
                    owner.requests.append(dict(self.headers))
                    status, body, etag, drip = owner.status, owner.body, owner.etag, owner.drip_s
                    location = owner.location
                try:
                    if location is not None:
                        self.send_response(302)
                        self.send_header("Location", location)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self._answer(status, body, etag, drip)
                finally:
                    # Counted once answered: a poller that asks again has used the answer.
                    with owner._changed:
                        owner.answered += 1
                        owner._changed.notify_all()

            def _answer(self, status: int, body: bytes, etag: str, drip: float | None) -> None:
                if self.path.split("?", 1)[0] != path:
                    status = 404
                if status != 200:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("ETag", etag)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if drip is None:
                    self.wfile.write(body)
                    return
                step = owner.drip_bytes
                for index in range(0, len(body), step):
                    self.wfile.write(body[index : index + step])
                    self.wfile.flush()
                    time.sleep(drip)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def serve(self, body: bytes, etag: str) -> None:
        """Serve this bundle (the bytes of an ``opa build`` archive) with this ETag."""
        with self._changed:
            self.body, self.etag, self.status = body, etag, 200

    def redirect(self, location: str | None) -> None:
        """Answer every request with ``302 Found`` to ``location`` (``None``: stop)."""
        with self._changed:
            self.location = location

    def fail(self, status: int) -> None:
        """Answer every request with this status."""
        with self._changed:
            self.status = status

    def wait_for_requests(self, count: int, timeout_s: float = 30.0) -> bool:
        """Wait until ``count`` requests in all have been answered; whether they were."""
        with self._changed:
            return self._changed.wait_for(lambda: self.answered >= count, timeout_s)

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> BundleServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
