"""A local HTTP server for the SDK tests: answers every POST with recorded provider bytes (the
fixtures of tests/data/stream, written from the providers' documentation) and keeps what each
request sent, so a test drives an official SDK over a real socket and sees both sides."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple


class Recorded:
    """A server on 127.0.0.1: ``answer(body, content_type)`` sets the next answers;
    ``requests`` holds (path, parsed JSON body) of each request received."""

    def __init__(self) -> None:
        self.requests: List[Tuple[str, Any]] = []
        self.body = b"{}"
        self.content_type = "application/json"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                owner.requests.append((self.path, json.loads(raw) if raw else None))
                self.send_response(200)
                self.send_header("Content-Type", owner.content_type)
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, body: bytes, content_type: str = "application/json") -> None:
        self.body = body
        self.content_type = content_type

    def last(self) -> Optional[Dict[str, Any]]:
        return self.requests[-1][1] if self.requests else None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
