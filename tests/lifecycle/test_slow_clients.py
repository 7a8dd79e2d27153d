"""Hostile and slow clients against a real `tripletlab serve`, over real sockets: a worker
body over the limit is refused before it is sent, connections that send their headers or
body too slowly are closed (app.internals), HSTS is sent over HTTPS, and serve speaks
HTTPS itself given a certificate."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.servers import TRIPLETLAB, Server, sqlite_url

pytestmark = pytest.mark.slow

TIMEOUT_S = 2  # both timeouts of the server under test
SLOW = {
    "TRIPLETLAB_HEADER_TIMEOUT_SECONDS": str(TIMEOUT_S),
    "TRIPLETLAB_BODY_TIMEOUT_SECONDS": str(TIMEOUT_S),
    "TRIPLETLAB_WEB_WORKERS": "1",
}
ANSWER_HEAD = (
    b"POST /api/w/sessions/none/answers HTTP/1.1\r\nHost: t\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    directory = tmp_path_factory.mktemp("slow")
    served = Server(sqlite_url(directory), directory / "data", env_extra=SLOW).start()
    yield served
    served.close()


def connect(server: Server) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", server.port))
    connection.settimeout(10 * TIMEOUT_S)  # far past the server's timeouts
    return connection


def read_all(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def status_and_body(reply: bytes) -> tuple[int, dict]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def test_a_connection_that_sends_nothing_is_closed(server: Server):
    with connect(server) as connection:
        assert read_all(connection) == b""  # closed, nothing asked so nothing answered


def test_headers_sent_a_byte_at_a_time_get_408_and_the_connection_closes(server: Server):
    with connect(server) as connection:
        head = b"GET /api/w/none HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"x" * 1000
        connection.settimeout(0.25)
        reply = b""
        for byte in head:  # four bytes a second, until the server stops listening
            try:
                connection.send(bytes([byte]))
                reply += connection.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if reply:
                break
        connection.settimeout(10 * TIMEOUT_S)
        reply += read_all(connection)
    status, body = status_and_body(reply)
    assert status == 408
    assert body == {"detail": f"the request's headers took longer than {TIMEOUT_S} s"}


def test_line_breaks_trickled_between_requests_do_not_hold_the_connection(server: Server):
    # Bytes before a request call none of the parser's callbacks, and each one stopped
    # uvicorn's keep-alive timer: with its own protocol the connection stayed open.
    with connect(server) as connection:
        connection.sendall(b"GET /api/w/none HTTP/1.1\r\nHost: t\r\n\r\n")
        connection.settimeout(0.25)
        received = b""
        while b"\r\n\r\n" not in received:  # the 404's head
            received += connection.recv(65536)
        for _ in range(int(10 * TIMEOUT_S / 0.25)):
            try:
                connection.send(b"\r\n")
                if connection.recv(65536) == b"":
                    break  # closed by the server
            except TimeoutError:
                continue
            except OSError:
                break
        else:
            pytest.fail("the connection was held open")


def test_a_body_that_stops_arriving_gets_408(server: Server):
    with connect(server) as connection:
        connection.sendall(ANSWER_HEAD % 100 + b'{"token": ')  # and then nothing
        status, body = status_and_body(read_all(connection))
    assert status == 408
    assert body == {"detail": f"the request body stopped arriving for {TIMEOUT_S} s; send it again"}


def test_a_slow_body_that_keeps_coming_is_read_whole(server: Server):
    # Pieces a quarter of the body timeout apart, for twice the timeout in all: the limit is
    # on a pause, not on the whole upload.
    body = b'{"token": "abc", "choice": 1, "client_ms": 100}'
    pieces = [body[i : i + 6] for i in range(0, len(body), 6)]
    with connect(server) as connection:
        connection.sendall(ANSWER_HEAD % len(body))
        for piece in pieces:
            time.sleep(2 * TIMEOUT_S / len(pieces))
            connection.sendall(piece)
        connection.sendall(b"GET /api/w/none HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        replies = read_all(connection)
    # The answer was read and judged by the route (no such session, no token: 401), then
    # the next request on the connection was served.
    assert replies.startswith(b"HTTP/1.1 401 "), replies[:200]
    assert b"HTTP/1.1 404 " in replies


def test_a_worker_body_announced_too_large_is_refused_before_it_is_sent(server: Server):
    with connect(server) as connection:
        connection.sendall(ANSWER_HEAD % (40 * 2**20))  # 40 MB announced, none sent
        connection.settimeout(TIMEOUT_S / 2)  # before the body timeout could answer
        reply = connection.recv(65536)
    status, body = status_and_body(reply)
    assert status == 413
    assert body == {"detail": "request body larger than the worker API's limit of 8 KiB"}


def test_many_slow_clients_are_closed_while_others_are_served(server: Server):
    connections = [connect(server) for _ in range(100)]
    try:
        for connection in connections:
            connection.sendall(b"GET /api/w/none HTTP/1.1\r\nHost: t\r\n")  # never ends
        assert httpx.get(f"{server.base}/api/w/none", timeout=10).status_code == 404
        replies = [read_all(connection) for connection in connections]
    finally:
        for connection in connections:
            connection.close()
    assert {status_and_body(reply)[0] for reply in replies} == {408}


def test_hsts_is_sent_over_a_trusted_proxys_https_only(server: Server):
    # 127.0.0.1 is the trusted proxy by default (TRIPLETLAB_FORWARDED_ALLOW_IPS).
    plain = httpx.get(f"{server.base}/api/w/none", timeout=10)
    proxied = httpx.get(
        f"{server.base}/api/w/none", headers={"X-Forwarded-Proto": "https"}, timeout=10
    )
    assert "strict-transport-security" not in plain.headers
    assert proxied.headers["strict-transport-security"] == "max-age=31536000"


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class TlsServer(Server):
    """A server given a certificate: reached over HTTPS."""

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"


def test_serve_speaks_https_with_a_certificate_and_sends_hsts(tmp_path: Path, monkeypatch):
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # httpx trusts it (as a CA)
    env = {"TRIPLETLAB_SSL_CERTFILE": str(cert), "TRIPLETLAB_SSL_KEYFILE": str(key)}
    server = TlsServer(sqlite_url(tmp_path), tmp_path / "data", env_extra=env).start()
    try:
        response = httpx.get(f"{server.base}/api/w/none", timeout=10)
        assert response.status_code == 404
        assert response.headers["strict-transport-security"] == "max-age=31536000"
        assert f"Triplet Lab on {server.base}" in server.output
        with pytest.raises(httpx.TransportError):  # no plain HTTP on that port
            httpx.get(f"http://127.0.0.1:{server.port}/api/w/none", timeout=10)
    finally:
        server.close()


def test_serve_refuses_half_a_certificate(tmp_path: Path):
    cert, _ = self_signed(tmp_path)
    server = Server(sqlite_url(tmp_path), tmp_path / "data")
    result = subprocess.run(
        [TRIPLETLAB, "serve", "--port", str(server.port)],
        env={**server.env, "TRIPLETLAB_SSL_CERTFILE": str(cert)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "TRIPLETLAB_SSL_CERTFILE is set but TRIPLETLAB_SSL_KEYFILE is not" in result.stderr


def test_the_stock_protocol_is_the_fallback_without_timeouts(tmp_path: Path):
    env = {**SLOW, "TRIPLETLAB_STOCK_HTTP_PROTOCOL": "true"}
    server = Server(sqlite_url(tmp_path), tmp_path / "data", env_extra=env).start()
    try:
        with connect(server) as connection:
            connection.sendall(b"GET /api/w/none HTTP/1.1\r\nHost: t\r\n")
            connection.settimeout(3 * TIMEOUT_S)
            with pytest.raises(TimeoutError):  # uvicorn's own protocol waits on
                connection.recv(65536)
    finally:
        server.close()
