"""The exporter's HTTP server on loopback: many clients at once and clients that never finish their
request cost neither threads nor scrapes."""

from __future__ import annotations

import select
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor

import pytest

from gputop.export.httpd import MetricsServer, Response
from gputop.export.server import Exporter, listen


def respond(path: str, headers: Mapping[str, str]) -> Response:
    if path == "/boom":
        raise RuntimeError("a bug while rendering")
    return "200 OK", [("Content-Type", "text/plain")], b"up 1\n" if path == "/metrics" else b"?"


@pytest.fixture()
def serving() -> Iterator[MetricsServer]:
    server = MetricsServer(("127.0.0.1", 0), respond, request_timeout=0.5, max_connections=40)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert not thread.is_alive()


def scrape(server: MetricsServer, path: str = "/metrics") -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}{path}",
                                timeout=5) as r:
        return r.read()


def slow_client(server: MetricsServer) -> socket.socket:
    s = socket.create_connection(server.server_address, timeout=5)
    s.sendall(b"GET /metr")  # and never the rest
    return s


def closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_connections_waiting_in_the_backlog_are_not_refused() -> None:
    """200 scrapes arriving at once while the server is busy wait in the listen queue (a backlog
    of 5 dropped their connections, and the clients timed out)."""
    server = listen(("127.0.0.1", 0), Exporter(None, interval=1).registry())  # not accepting
    socks = []
    try:
        for _ in range(100):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(server.server_address)
            socks.append(s)
        deadline = time.monotonic() + 3
        pending = list(socks)
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], pending, [], 0.1)
            pending = [s for s in pending if s not in writable]
        assert not pending, f"{len(pending)} of 100 connections not established"
    finally:
        for s in socks:
            s.close()
        server.server_close()


def test_slow_clients_are_closed_and_cost_no_thread(serving: MetricsServer) -> None:
    threads = threading.active_count()
    held = [slow_client(serving) for _ in range(30)]
    try:
        assert scrape(serving) == b"up 1\n"  # while they hold
        assert threading.active_count() <= threads + 4  # the render workers, not one a client
        assert all(closed_by_server(s, within=3) for s in held)  # after request_timeout
    finally:
        for s in held:
            s.close()
    assert scrape(serving) == b"up 1\n"


def test_more_slow_clients_than_connections_cannot_keep_a_scrape_out(
        serving: MetricsServer) -> None:
    held = [slow_client(serving) for _ in range(100)]  # 2.5x max_connections
    try:
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(lambda _: scrape(serving), range(20)))
        assert answers == [b"up 1\n"] * 20
        assert serving.connections <= serving.max_connections + 20
    finally:
        for s in held:
            s.close()


def test_many_concurrent_scrapes_all_answered(serving: MetricsServer) -> None:
    serving.max_connections = 1000
    with ThreadPoolExecutor(100) as pool:
        answers = list(pool.map(lambda _: scrape(serving), range(200)))
    assert answers == [b"up 1\n"] * 200


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", b"431"),
    (b"nonsense\r\n\r\n", b"400"),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"405"),
    (b"HEAD /metrics HTTP/1.1\r\n\r\n", b"200"),
    (b"GET /boom HTTP/1.1\r\n\r\n", b"500"),
])
def test_bad_requests_get_an_answer_and_the_server_goes_on(
        serving: MetricsServer, request_bytes: bytes, status: bytes) -> None:
    with socket.create_connection(serving.server_address, timeout=5) as s:
        s.sendall(request_bytes)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.split(b" ", 2)[1] == status
    if request_bytes.startswith(b"HEAD"):
        assert answer.endswith(b"\r\n\r\n") and b"Content-Length: 5" in answer
    assert scrape(serving) == b"up 1\n"


def test_shutdown_ends_serving_with_clients_still_connected(serving: MetricsServer) -> None:
    held = slow_client(serving)
    serving.shutdown()
    assert closed_by_server(held, within=3)
    held.close()
