"""A real webhook receiver for the notification tests: an http.server on 127.0.0.1 in a thread.

It records every request (path, headers, raw body) and answers from a script: `answers` is a list of
(status, headers, body) taken one per request; when it is empty every request gets 200 "ok".
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        lowered = {key.lower(): value for key, value in self.headers.items()}
        return lowered.get(name.lower())


@dataclass
class Receiver:
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    answers: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, status: int, body: bytes = b"", **headers: str) -> None:
        """Queue the answer to the next request not yet answered."""
        self.answers.append((status, {key.replace("_", "-"): value for key, value in headers.items()}, body))


def _handler(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.requests.append(Received(self.path, dict(self.headers.items()), body))
                status, headers, answer = receiver.answers.pop(0) if receiver.answers else (200, {}, b"ok")
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format, *args):  # quiet
            pass

    return Handler


@contextlib.contextmanager
def serve() -> Iterator[Receiver]:
    """A running receiver (a test's fixture wraps it); its URL is http://127.0.0.1:<port>/hook."""
    state = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    """A local port nothing listens on (bound, then closed): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
