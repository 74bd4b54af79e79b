"""A stand-in for Prometheus' HTTP API on loopback, for the fleet's tests and benchmark.

`FakePrometheus` is a real HTTP server (http.server in a thread) that answers `/api/v1/query` and
`/api/v1/targets` with the JSON envelope Prometheus uses. What it answers comes from `answer`, a
function of the path and the query parameters; `FleetAnswers` is such a function for the fleet's
own queries over a list of `FakeNode`s that a test can change between refreshes.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gputop.fleet import model

# (HTTP status, body): a dict is sent as JSON, bytes as they are.
Reply = tuple[int, "dict[str, Any] | bytes"]
AnswerFn = Callable[[str, Mapping[str, str]], Reply]


def success(data: Any) -> Reply:
    return 200, {"status": "success", "data": data}


def vector(samples: Iterable[tuple[Mapping[str, str], float]], at: float) -> Reply:
    return success({"resultType": "vector", "result": [
        {"metric": dict(labels), "value": [at, _text(v)]} for labels, v in samples]})


def error(kind: str, message: str, status: int = 400) -> Reply:
    return status, {"status": "error", "errorType": kind, "error": message}


def _text(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


class FakePrometheus:
    """`with FakePrometheus(answer) as prom:` serves on `prom.url` until the block ends.
    `requests` and `headers` keep what was asked."""

    def __init__(self, answer: AnswerFn) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                params = dict(urllib.parse.parse_qsl(parts.query))
                fake.requests.append((parts.path, params))
                fake.headers.append(dict(self.headers.items()))
                try:
                    status, body = fake.answer(parts.path, params)
                except Exception as e:  # a bug in a test's answer: a 500, not a hung client
                    status, body = 500, f"{type(e).__name__}: {e}".encode()
                raw = json.dumps(body).encode() if isinstance(body, dict) else body
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if isinstance(body, dict)
                                 else "text/html")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                        daemon=True, name="fake-prometheus")

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ----------------------------------------------------------------------------------------------
# A fleet to answer for


# What a FakeNode exports of each GPU by default, in FakeGpu's order.
GPU_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
               "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
               "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")


@dataclass
class FakeGpu:
    util: float = 95.0
    fb_used: float = 40960.0  # MiB
    fb_free: float = 40000.0
    temp: float = 60.0
    power: float = 650.0
    sm_clock: float = 1980.0
    throttle: int = 0x004
    model: str = "NVIDIA H100 80GB HBM3"


@dataclass
class FakeNode:
    hostname: str
    instance: str
    job: str = "dcgm"
    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu() for _ in range(8)])
    up: bool | None = True  # None: its target is gone (no `up` series)
    exporting: bool = True  # False: no GPU series (stale-marked or the target is gone)
    sample_age: float = 0.5  # seconds between its newest sample and the query's time
    findings: list[dict[str, str]] = field(default_factory=list)  # labels: id, severity, gpu...
    interval: float = 1.0  # the target's scrape interval
    metrics: frozenset[str] | None = None  # the DCGM metrics it exports; None: all of GPU_METRICS

    def exports(self, name: str) -> bool:
        return name in (GPU_METRICS if self.metrics is None else self.metrics)

    def gpu_labels(self, i: int) -> dict[str, str]:
        return {"gpu": str(i), "UUID": f"GPU-{self.hostname}-{i:04d}",
                "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                "device": f"nvidia{i}", "modelName": self.gpus[i].model,
                "Hostname": self.hostname, "job": self.job, "instance": self.instance}


@dataclass
class FleetAnswers:
    """Answers the fleet's queries (model.VALUES_QUERY, STAMPS_QUERY, SEEN_QUERY, `vector(1)`,
    the targets list) for `nodes` as of `time`."""

    nodes: list[FakeNode]
    time: float = 1_800_000_000.0
    targets_api: bool = True

    def __call__(self, path: str, params: Mapping[str, str]) -> Reply:
        if path == "/api/v1/targets":
            if not self.targets_api:
                return 404, b"404 page not found"
            return success({"activeTargets": [
                {"labels": {"job": n.job, "instance": n.instance},
                 "scrapeInterval": f"{n.interval:g}s",
                 "health": "up" if n.up else "down"}
                for n in self.nodes if n.up is not None], "droppedTargets": []})
        if path != "/api/v1/query":
            return 404, b"404 page not found"
        query = params.get("query", "")
        at = float(params.get("time", self.time))
        if query == "vector(1)":
            return vector([({}, 1.0)], at)
        if query == model.VALUES_QUERY:
            return vector(self.values(), at)
        if query in (model.STAMPS_QUERY, model.SEEN_QUERY):
            # `timestamp(NAME) or ...`: the times of the GPUs that export one of those names.
            return vector(self.stamps(at, set(re.findall(r"timestamp\((\w+)\)", query))), at)
        return error("bad_data", f"this fake does not know the query {query!r}")

    def values(self) -> list[tuple[dict[str, str], float]]:
        out: list[tuple[dict[str, str], float]] = []
        for n in self.nodes:
            if n.up is not None:
                out.append(({"__name__": "up", "job": n.job, "instance": n.instance},
                            1.0 if n.up else 0.0))
            if not n.exporting:
                continue
            for i, g in enumerate(n.gpus):
                labels = n.gpu_labels(i)
                for name, v in zip(GPU_METRICS, (g.util, g.fb_used, g.fb_free, g.temp, g.power,
                                                 g.sm_clock, float(g.throttle))):
                    if n.exports(name):
                        out.append(({"__name__": name, **labels}, v))
            for f in n.findings:
                out.append(({"__name__": model.FINDING_METRIC, "job": n.job,
                             "instance": n.instance, "Hostname": n.hostname, **f}, 1.0))
        return out

    def stamps(self, at: float, names: set[str]) -> list[tuple[dict[str, str], float]]:
        return [(n.gpu_labels(i), at - n.sample_age)
                for n in self.nodes if n.exporting and any(map(n.exports, names))
                for i in range(len(n.gpus))]
