"""The exporter's HTTP server: one event-loop thread holds every connection, a few workers render.

A thread per connection (the standard library's threading servers) lets clients decide how many
threads gputop runs and for how long: 200 concurrent scrapes overflowed a listen backlog of 5, and
clients that connect and never finish their request (slowloris) each held a thread forever. Here a
connection costs a socket and a coroutine until its request has arrived, and only then a worker:

* the listen backlog is the system's (SOMAXCONN), not 5;
* a request must arrive whole within `request_timeout` s, its head at most `HEAD_MAX` bytes, and
  a response be taken within `request_timeout` s; otherwise the connection is closed;
* at most `max_connections` are open: a new one closes the oldest still waiting for its request,
  so clients that hold connections open cannot keep a scrape out;
* `workers` threads render responses; a scrape never waits for the GPUs (the exporter renders its
  latest state).

One request per connection (`Connection: close`), as the server it replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import resource
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from gputop.errors import GputopError

HEAD_MAX = 8192  # bytes of request line and headers; a scrape sends about 200
REQUEST_TIMEOUT = 10.0  # Prometheus's default scrape timeout
MAX_CONNECTIONS = 1024
WORKERS = 4

Response = tuple[str, list[tuple[str, str]], bytes]  # status ("200 OK"), headers, body
Handler = Callable[[str, Mapping[str, str]], Response]  # path, headers (lower-case names)

_REASONS = {400: "Bad Request", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


class MetricsServer:
    """Binds at construction (an address in use is a one-line error); `serve_forever` runs the
    event loop in the calling thread until `shutdown` (from any thread)."""

    def __init__(self, address: tuple[str, int], handler: Handler, *,
                 max_connections: int = MAX_CONNECTIONS,
                 request_timeout: float = REQUEST_TIMEOUT, workers: int = WORKERS) -> None:
        self.handler = handler
        self.max_connections = min(max_connections, _fd_budget())
        self.request_timeout = request_timeout
        self.socket = _bind(address)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gputop-exporter-http")
        self._waiting: dict[asyncio.StreamWriter, None] = {}  # oldest first: no request yet
        self._writers: set[asyncio.StreamWriter] = set()  # every open connection
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._running = threading.Event()
        self._done = threading.Event()
        self._stopping = False

    @property
    def connections(self) -> int:
        return len(self._writers)

    def serve_forever(self) -> None:
        self._running.set()
        try:
            asyncio.run(self._serve())
        finally:
            # A connection accepted as the loop stopped can be left in a task that never ran:
            # collecting it closes its socket now rather than at some later collection.
            gc.collect()
            self._done.set()

    def shutdown(self) -> None:
        """Stops `serve_forever` and waits until it has."""
        self._stopping = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(stop.set)
        if self._running.is_set():
            self._done.wait(timeout=5)

    def server_close(self) -> None:
        self.socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        transports: set[asyncio.BaseTransport] = set()

        def protocol() -> asyncio.Protocol:
            return _Tracked(asyncio.StreamReader(limit=HEAD_MAX), self._connection, transports)

        server = await self._loop.create_server(protocol, sock=self.socket,
                                                backlog=socket.SOMAXCONN)
        if self._stopping:
            self._stop.set()
        async with server:
            await self._stop.wait()
            server.close()  # accepts no more; those not yet accepted are refused
            # Those accepted, handled or not yet; an accept under way makes its transport
            # within a few loop turns.
            for _ in range(2):
                for transport in list(transports):
                    transport.abort()  # type: ignore[attr-defined]
                await asyncio.sleep(0.05)

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            if len(self._writers) > self.max_connections and not self._evict_oldest():
                await self._error(writer, 503)
                return
            self._waiting[writer] = None
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                              self.request_timeout)
            except asyncio.LimitOverrunError:
                await self._error(writer, 431)
                return
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                writer.transport.abort()  # too slow, gone, or evicted: nothing to answer
                return
            finally:
                self._waiting.pop(writer, None)
            parts = head.split(b"\r\n", 1)[0].split()
            if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
                await self._error(writer, 400)
                return
            if parts[0] not in (b"GET", b"HEAD"):
                await self._error(writer, 405)
                return
            path = parts[1].decode("latin-1").split("?", 1)[0]
            headers = {}
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
            try:
                status, extra, body = await asyncio.get_running_loop().run_in_executor(
                    self._pool, self.handler, path, headers)
            except Exception:
                await self._error(writer, 500)
                return
            await self._send(writer, status, extra, b"" if parts[0] == b"HEAD" else body,
                             length=len(body))
        except (Exception, asyncio.CancelledError):  # one client's trouble, or shutdown
            writer.transport.abort()
        finally:
            self._writers.discard(writer)

    def _evict_oldest(self) -> bool:
        """Closes the connection that has waited longest for its request; False if none waits."""
        for writer in self._waiting:
            del self._waiting[writer]
            writer.transport.abort()
            return True
        return False

    async def _error(self, writer: asyncio.StreamWriter, code: int) -> None:
        body = f"{_REASONS[code].lower()}\n".encode()
        await self._send(writer, f"{code} {_REASONS[code]}",
                         [("Content-Type", "text/plain; charset=utf-8")], body, length=len(body))

    async def _send(self, writer: asyncio.StreamWriter, status: str,
                    headers: list[tuple[str, str]], body: bytes, *, length: int) -> None:
        lines = [f"HTTP/1.1 {status}"]
        lines += [f"{k}: {v}" for k, v in headers if k.lower() != "content-length"]
        lines += [f"Content-Length: {length}", "Connection: close", "", ""]
        writer.write("\r\n".join(lines).encode("latin-1") + body)
        try:
            await asyncio.wait_for(writer.drain(), self.request_timeout)
        except (asyncio.TimeoutError, ConnectionError):  # a client that does not read
            writer.transport.abort()
            return
        writer.close()


class _Tracked(asyncio.StreamReaderProtocol):
    """A connection's protocol that keeps its transport in `transports` while it is open, so
    that shutdown can close connections whose handler has not run yet."""

    def __init__(self, reader: asyncio.StreamReader,
                 handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                   Awaitable[None]],
                 transports: set[asyncio.BaseTransport]) -> None:
        super().__init__(reader, handler)
        self._transports = transports
        self._mine: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._mine = transport
        self._transports.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transports.discard(self._mine)
        super().connection_lost(exc)


def _bind(address: tuple[str, int]) -> socket.socket:
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN,
                                    reuse_port=False)
    except OSError as e:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if e.errno == errno.EADDRINUSE:
            raise GputopError(f"cannot serve metrics on {where}: the port is in use",
                              hint="stop the other exporter or pick another port with "
                                   "--metrics HOST:PORT") from None
        raise GputopError(f"cannot serve metrics on {where}: {e.strerror or e}") from None


def _fd_budget() -> int:
    """Connections this process can hold open, leaving room for the files it needs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else max(16, soft - 64)
