"""core.http.HttpClient against a real HTTP(S) server on 127.0.0.1: answers of every status come back as
Responses, no answer (refused, timed out, cut mid-body) is Unreachable, an oversized answer or an untrusted
certificate is a permanent error; credentials, headers and the JSON body are sent."""

import contextlib
import functools
import json
import shutil
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core import http
from core.errors import ExternalError, Unreachable

# These servers listen on 127.0.0.1: the client's own address may be loopback (core.outbound's allowance;
# tests/core/test_outbound.py shows what is refused without it).
HttpClient = functools.partial(http.HttpClient, allow_private=True)

LARGE = 4096


class Handler(BaseHTTPRequestHandler):
    release: threading.Event  # set by the test server's owner: a held answer may go

    def _send(self, status: int, body: bytes, content_type: str = "application/json", length=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def _answer(self):
        if self.path == "/json":
            self._send(200, b'{"racks": 3, "name": "gb-r01"}', "application/json; charset=utf-8")
        elif self.path == "/echo":
            length = int(self.headers.get("Content-Length") or 0)
            echoed = {
                "method": self.command,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": json.loads(self.rfile.read(length)) if length else None,
            }
            self._send(200, json.dumps(echoed).encode())
        elif self.path == "/missing":
            self._send(404, b'{"message": "no such rack"}')
        elif self.path == "/failing":
            self._send(503, b"<html>upstream is down</html>", "text/html")
        elif self.path == "/slow":
            self.release.wait(10)
            self._send(200, b"{}")
        elif self.path == "/large":
            self._send(200, b"x" * LARGE, "text/plain")
        elif self.path == "/cut":
            self._send(200, b'{"racks": ', length=100)  # announces 100 bytes, sends 10, closes
        else:
            self._send(500, b"unexpected path")

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def server(tls: ssl.SSLContext | None = None):
    release = threading.Event()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Handler,), {"release": release}))
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    # A short poll interval: shutdown() waits for it, at the end of every test.
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def url():
    with server() as base:
        yield base


def test_a_json_answer(url):
    response = HttpClient(url, timeout=5).request("GET", "/json")
    assert (response.status, response.ok, response.transient_failure) == (200, True, False)
    assert response.json() == {"racks": 3, "name": "gb-r01"}
    assert response.headers["content-type"] == "application/json; charset=utf-8"


def test_headers_credentials_and_a_json_body_are_sent(url):
    client = HttpClient(url, headers={"Accept": "application/json"}, basic_auth=("rw-user", "secret"))
    echoed = client.request("POST", "/echo", {"racks": [1, 2]}, headers={"X-Slurm-User-Name": "rp"}).json()
    assert echoed["method"] == "POST" and echoed["body"] == {"racks": [1, 2]}
    headers = echoed["headers"]
    assert headers["accept"] == "application/json" and headers["x-slurm-user-name"] == "rp"
    assert headers["authorization"] == "Basic cnctdXNlcjpzZWNyZXQ="  # base64 of rw-user:secret
    assert headers["content-type"] == "application/json"

    bearer = HttpClient(url, bearer_token="abc.def").request("GET", "/echo").json()
    assert bearer["headers"]["authorization"] == "Bearer abc.def"


def test_without_a_base_url_the_path_is_the_whole_url(url):
    assert HttpClient(timeout=5).request("GET", url + "/json").json()["racks"] == 3
    with pytest.raises(ValueError, match="not an http"):
        HttpClient().request("GET", "file:///etc/passwd")


def test_a_404_is_an_answer_not_an_error(url):
    response = HttpClient(url, timeout=5).request("GET", "/missing")
    assert (response.status, response.reason, response.ok) == (404, "Not Found", False)
    assert not response.transient_failure
    assert response.json() == {"message": "no such rack"}


def test_a_5xx_is_an_answer_marked_as_a_transient_failure(url):
    response = HttpClient(url, timeout=5).request("GET", "/failing")
    assert response.status == 503 and response.transient_failure
    assert response.json_or_text() == "<html>upstream is down</html>"


def test_a_closed_port_is_unreachable_and_named():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(Unreachable) as caught:
        HttpClient(f"http://127.0.0.1:{port}", timeout=5).request("GET", "/json")
    assert caught.value.transient
    assert str(caught.value) == f"connection refused by 127.0.0.1:{port}"


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_server_that_does_not_answer_in_time_is_unreachable(url):
    with pytest.raises(Unreachable) as caught:
        HttpClient(url, timeout=0.3).request("GET", "/slow")
    assert caught.value.transient
    assert str(caught.value) == f"no answer from {url.split('//')[1]} within 0.3 seconds"


def test_an_answer_over_max_bytes_is_a_permanent_error(url):
    assert len(HttpClient(url, max_bytes=LARGE).request("GET", "/large").body) == LARGE
    with pytest.raises(ExternalError) as caught:
        HttpClient(url, max_bytes=LARGE - 1).request("GET", "/large")
    assert not caught.value.transient and not isinstance(caught.value, Unreachable)
    assert f"larger than {LARGE - 1} bytes" in str(caught.value)


def test_an_answer_cut_mid_body_is_unreachable(url):
    with pytest.raises(Unreachable) as caught:
        HttpClient(url, timeout=5).request("GET", "/cut")
    assert caught.value.transient
    assert "cut off after 10 bytes (90 missing)" in str(caught.value)


# --- TLS ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 made by openssl: (certificate file, key file)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-keyout", str(key), "-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


@pytest.fixture
def tls_url(certificate):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    with server(context) as base:
        yield base


def test_https_with_the_ca_file_is_verified(tls_url, certificate):
    assert HttpClient(tls_url, ca_file=certificate[0], timeout=5).request("GET", "/json").json()["racks"] == 3


def test_https_with_an_unknown_certificate_is_refused_for_good(tls_url):
    with pytest.raises(ExternalError) as caught:
        HttpClient(tls_url, timeout=5).request("GET", "/json")
    assert not caught.value.transient
    assert f"the TLS certificate of {tls_url.split('//')[1]} is not trusted: self-signed" in str(caught.value)
    assert "CA file" in caught.value.what_to_do


def test_https_insecure_skips_the_check(tls_url):
    assert HttpClient(tls_url, insecure=True, timeout=5).request("GET", "/json").status == 200
