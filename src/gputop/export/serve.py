"""`gputop serve`: a Prometheus exporter. One thread polls the GPUs (or plays a recording) and runs
the diagnostics every `--interval`; HTTP scrapes read the latest state and never call NVML."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from gputop.export.httpd import Handler, MetricsServer, Response
from gputop.export.prometheus import CONTENT_TYPE, ExportState, SnapshotCollector, exposition

DEFAULT_ADDRESS = ("127.0.0.1", 9400)  # dcgm-exporter's port: gputop serve stands in for it
LIVE_INTERVAL = 5.0
RECORDING_INTERVAL = 1.0  # a recording plays one tick a second, its own pace
TEXT = "text/plain; charset=utf-8"


class Exporter:
    """Polls `feed` and holds the latest `ExportState` for scrapes to read. `poll` is one tick;
    `start` runs ticks every `interval` s in a thread. A failed poll is counted and reported once;
    the state it leaves goes stale, and a stale snapshot is not exported."""

    def __init__(self, feed: Any, *, interval: float, hostname: str = "", engine: Any = None,
                 err: TextIO | None = None, clock: Callable[[], float] = time.time) -> None:
        self.feed = feed
        self.interval = interval
        self.engine = engine
        self.err = err
        self._clock = clock
        self._hostname = hostname
        self._open: set[tuple[Any, ...]] = set()
        self._opened: dict[str, int] = {}
        self._last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = ExportState(hostname=hostname, stale_after=max(3 * interval, 15.0))

    def poll(self) -> None:
        started = time.perf_counter()
        try:
            snap = self.feed.poll_once()
            findings = list(self.engine.update(snap)) if self.engine is not None else []
        except Exception as e:  # a sick GPU or a bad tick must not stop the exporter
            self._failed(e)
            return
        self._count_opened(findings)
        host = self._hostname or snap.host.hostname or snap.system.hostname or \
            socket.gethostname()
        self.state = dataclasses.replace(
            self.state, snapshot=snap, findings=tuple(findings),
            findings_opened=dict(self._opened), hostname=host, polled_at=self._clock(),
            poll_seconds=round(time.perf_counter() - started, 6), ok=True)
        self._last_error = ""

    def _failed(self, e: Exception) -> None:
        message = str(e) or type(e).__name__
        if message != self._last_error and self.err is not None:
            self.err.write(f"gputop: poll failed: {message}\n")
            self.err.flush()
        self._last_error = message
        self.state = dataclasses.replace(self.state, ok=False,
                                         poll_errors=self.state.poll_errors + 1)

    def _count_opened(self, findings: Iterable[Any]) -> None:
        now_open = {(f.id, f.device, f.pid, f.since): f.severity for f in findings if f.open}
        for key, severity in now_open.items():
            if key not in self._open:
                self._opened[severity] = self._opened.get(severity, 0) + 1
        self._open = set(now_open)

    def run(self) -> None:
        """Polls every `interval` until `stop`; a slow poll stretches the interval."""
        next_at = time.monotonic()
        while not self._stop.is_set():
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))
            if self._stop.is_set():
                break
            self.poll()
            if time.monotonic() - next_at > self.interval:  # overran: wait a whole interval
                next_at = time.monotonic()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="gputop-exporter-poll",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def registry(self) -> CollectorRegistry:
        """What a scrape reads: this exporter's state, and the process metrics of gputop itself."""
        reg = CollectorRegistry(auto_describe=False)
        reg.register(SnapshotCollector(lambda: self.state, self._clock))
        ProcessCollector(registry=reg)
        return reg


# ----------------------------------------------------------------------------------------------
# HTTP


def metrics_app(registry: CollectorRegistry) -> Handler:
    """The answer to a request's path: /metrics the exposition, / where the metrics are."""

    def respond(path: str) -> Response:
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE, exposition(registry.collect())
        if path == "/":
            return "200 OK", TEXT, b"gputop exporter: metrics at /metrics\n"
        return "404 Not Found", TEXT, b"not found: metrics are at /metrics\n"

    return respond


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (every interface), `PORT` (loopback), `[::1]:PORT`."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = DEFAULT_ADDRESS[0], text
    elif not host:
        host = "0.0.0.0"
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"no such port: {number}")
    return host, number


def listen(address: tuple[str, int], registry: CollectorRegistry) -> MetricsServer:
    """Binds the HTTP server (not yet serving). An address in use is the user's to fix."""
    return MetricsServer(address, metrics_app(registry))


def url(server: MetricsServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{f'[{host}]' if ':' in str(host) else host}:{port}/metrics"


# ----------------------------------------------------------------------------------------------
# the command


def build_parser() -> argparse.ArgumentParser:
    from gputop.cli import _device_list, _positive

    p = argparse.ArgumentParser(
        prog="gputop serve",
        description="Serve GPU metrics to Prometheus, with dcgm-exporter's metric names "
                    "(docs/metrics.md).")
    p.add_argument("--metrics", type=parse_address, default=DEFAULT_ADDRESS, metavar="ADDR:PORT",
                   help="where to listen (default 127.0.0.1:9400, dcgm-exporter's port; "
                        ":9400 or 0.0.0.0:9400 for every interface; port 0 picks a free one)")
    p.add_argument("--interval", type=_positive, default=None, metavar="SECONDS",
                   help=f"seconds between polls (default {LIVE_INTERVAL:g}; "
                        f"{RECORDING_INTERVAL:g} with --demo or --replay)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true",
                        help="serve the bundled recording of an 8-GPU node, looping")
    source.add_argument("--replay", metavar="FILE", help="serve a recording, looping")
    p.add_argument("--hostname", default="", metavar="NAME",
                   help="the Hostname label (default: the recorded or this machine's host name)")
    p.add_argument("--devices", type=_device_list, default=None, metavar="LIST",
                   help="only these GPU indexes, e.g. 0,1,4-7")
    p.add_argument("--once", action="store_true",
                   help="print one scrape on stdout and exit (no server)")
    return p


def open_feed(args: argparse.Namespace) -> Any:
    if args.demo or args.replay:
        from gputop.replay import RecordingFeed, demo_path

        feed = RecordingFeed.from_file(args.replay or demo_path(), loop=True, retime=True)
        if feed.warning:
            print(f"gputop: warning: {feed.warning}", file=sys.stderr)
        return feed
    from gputop.cli import live_poller

    return live_poller(args)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    recorded = bool(args.demo or args.replay)
    interval = args.interval or (RECORDING_INTERVAL if recorded else LIVE_INTERVAL)
    from gputop.diagnose import default_engine

    feed = open_feed(args)
    exporter = Exporter(feed, interval=interval, hostname=args.hostname,
                        engine=default_engine(), err=sys.stderr)
    try:
        if args.once:
            exporter.poll()
            sys.stdout.buffer.write(exposition(exporter.registry().collect()))
            sys.stdout.flush()
            return 0 if exporter.state.ok else 1
        server = listen(args.metrics, exporter.registry())
        threading.Thread(target=server.serve_forever, name="gputop-exporter-http",
                         daemon=True).start()
        try:
            exporter.poll()
            print(f"gputop: serving metrics on {url(server)} every {interval:g} s "
                  "(Ctrl-C to stop)", file=sys.stderr, flush=True)
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, lambda *_: exporter.stop())
            exporter.run()
        finally:
            server.shutdown()
            server.server_close()
    finally:
        exporter.stop()
        feed.close()
    return 0
