"""The Prometheus exporter of `gputop serve`. One thread polls the GPUs (or plays a recording)
and runs the diagnostics every `--interval`; HTTP scrapes read the latest state and never call
NVML."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from gputop.diagnose import Engine
from gputop.errors import GputopError
from gputop.export.httpd import Handler, MetricsServer, Response
from gputop.export.prometheus import ExportState, SnapshotCollector, negotiate
from gputop.feeds import PolledFeed
from gputop.sources.pod_resources import PodRef, PodResources

DEFAULT_ADDRESS = ("127.0.0.1", 9400)  # dcgm-exporter's port: gputop serve stands in for it
LIVE_INTERVAL = 5.0
RECORDING_INTERVAL = 1.0  # a recording plays one tick a second, its own pace
TEXT = ("Content-Type", "text/plain; charset=utf-8")


class Exporter:
    """Polls `feed` and holds the latest `ExportState` for scrapes to read. `poll` is one tick;
    `start` runs ticks every `interval` s in a thread. A failed poll is counted and reported once;
    the state it leaves goes stale, and a stale snapshot is not exported."""

    def __init__(self, feed: PolledFeed, *, interval: float, hostname: str = "",
                 hostname_label: str = "Hostname", engine: Engine | None = None,
                 pods: PodResources | None = None,
                 err: TextIO | None = None, clock: Callable[[], float] = time.time) -> None:
        self.feed = feed
        self.interval = interval
        self.engine = engine
        self.pods = pods  # a PodResources: GPU -> pod labels, asked at every poll
        self.err = err
        self._clock = clock
        self._hostname = hostname
        self._open: set[tuple[Any, ...]] = set()
        self._opened: dict[str, int] = {}
        self._last_error = ""
        self._last_pods_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = ExportState(hostname=hostname, hostname_label=hostname_label,
                                 stale_after=max(3 * interval, 15.0))

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
            findings_opened=dict(self._opened), hostname=host, pods=self._ask_pods(),
            polled_at=self._clock(), poll_seconds=round(time.perf_counter() - started, 6),
            ok=True)
        self._last_error = ""

    def _ask_pods(self) -> dict[str, PodRef]:
        """The kubelet's GPU -> pod map now; none while it does not answer (said once): GPU
        series then go without pod labels rather than with a pod that may have left."""
        if self.pods is None:
            return {}
        try:
            pods = self.pods.gpu_pods()
        except GputopError as e:
            if str(e) != self._last_pods_error and self.err is not None:
                self.err.write(f"gputop: warning: {e}; GPU series go without pod labels\n")
                self.err.flush()
            self._last_pods_error = str(e)
            return {}
        self._last_pods_error = ""
        return pods

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
    """The answer to a request: /metrics the exposition (OpenMetrics or text, gzipped or not, as
    the scraper asks), / where the metrics are."""

    def respond(path: str, headers: Mapping[str, str]) -> Response:
        if path == "/metrics":
            body, extra = negotiate(registry, headers.get("accept"),
                                    headers.get("accept-encoding"))
            return "200 OK", [*extra, ("Vary", "Accept, Accept-Encoding")], body
        if path == "/":
            return "200 OK", [TEXT], b"gputop exporter: metrics at /metrics\n"
        return "404 Not Found", [TEXT], b"not found: metrics are at /metrics\n"

    return respond


def listen(address: tuple[str, int], registry: CollectorRegistry) -> MetricsServer:
    """Binds the HTTP server (not yet serving). An address in use is the user's to fix."""
    return MetricsServer(address, metrics_app(registry))


def url(server: MetricsServer) -> str:
    host, port = str(server.server_address[0]), server.server_address[1]
    return f"http://{f'[{host}]' if ':' in str(host) else host}:{port}/metrics"
