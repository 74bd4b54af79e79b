"""Exporter figures: CPU per poll and per scrape with 8 GPUs, and the exporter's CPU share when
Prometheus scrapes every 15 s.

    python bench/exporter_bench.py
    python bench/exporter_bench.py --load [--rounds 5 --concurrent 200 --slow 2000]

- poll: what `gputop serve` does every --interval on a live node: the NVML and host sources
  through the real pynvml binding over the fake library fed with the demo's 8xH100 snapshots,
  then the diagnostics engine. The fake library runs in Python, so this is an upper bound of
  gputop's share; a real NVML adds its driver time (docs/diagnostics.md §0.11).
- scrape: the latest snapshot to Prometheus text, in process; then over HTTP, as the CPU the
  serving process spends per scrape (measured with psutil on a `gputop serve --demo` process),
  once as a plain client asks (text, uncompressed) and once as Prometheus asks (OpenMetrics,
  gzip), with the bytes each sends.
- load (`--load`): rounds of concurrent scrapes over loopback (how many fail or take longer than
  10 s, the latency), then slow clients (slowloris: connections that send one byte of a request
  and hold it) with scrapes made while they hold, and the server's RSS and threads throughout.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psutil

from gputop.diagnose import default_engine
from gputop.export.prometheus import ExportState, exposition, families
from gputop.feeds.playback import RecordingFeed, demo_path
from gputop.recording import read_recording
from gputop.sources.host import HostSource
from gputop.sources.nvml import NvmlSource
from gputop.sources.poller import Poller
from gputop.testing.fake_nvml import FakeNvml

SCRAPE_INTERVAL = 15.0


def poll_cost(snaps: list, interval: float, polls: int = 60) -> tuple[float, float]:
    """Median CPU ms of one poll and of its diagnostics, on the live path (fake NVML)."""
    engine = default_engine(plugins=False)
    with FakeNvml(snaps) as fake:
        clock = [1_800_000_000.0]
        poller = Poller([NvmlSource(slow_interval=5.0)], HostSource(), clock=lambda: clock[0])
        poller.open()
        poll, diagnose = [], []
        for _ in range(polls):
            clock[0] += interval
            start = time.process_time()
            snap = poller.poll_once()
            middle = time.process_time()
            engine.update(snap)
            poll.append(middle - start)
            diagnose.append(time.process_time() - middle)
            fake.advance()
        poller.close()
    return statistics.median(poll) * 1e3, statistics.median(diagnose) * 1e3


def demo_poll_cost(polls: int = 120) -> float:
    """Median CPU ms of one `gputop serve --demo` tick: decode a recorded tick + diagnostics."""
    feed = RecordingFeed.from_file(demo_path())
    engine = default_engine(plugins=False)
    costs = []
    for _ in range(polls):
        start = time.process_time()
        engine.update(feed.poll_once())
        costs.append(time.process_time() - start)
    return statistics.median(costs) * 1e3


def render_cost(snap, runs: int = 200) -> tuple[float, int]:
    state = ExportState(snapshot=snap, polled_at=time.time(), ok=True)
    costs, size = [], 0
    for _ in range(runs):
        start = time.process_time()
        size = len(exposition(families(state, time.time())))
        costs.append(time.process_time() - start)
    return statistics.median(costs) * 1e3, size


PLAIN: dict[str, str] = {}
PROMETHEUS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
              "Accept-Encoding": "gzip"}


def http_scrape_cost(scrapes: int = 200) -> dict[str, tuple[float, int]]:
    """CPU ms the serving process spends per HTTP scrape (no polls in the window), and the bytes
    of one answer, for a plain client and for Prometheus."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop", "serve", "--demo", "--interval", "3600",
         "--metrics", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"(http://\S+/metrics)", line)
        if not m:
            raise RuntimeError(f"gputop serve did not start: {line!r}")
        url = m.group(1)
        server = psutil.Process(proc.pid)
        out = {}
        for name, headers in (("plain", PLAIN), ("prometheus", PROMETHEUS)):
            request = urllib.request.Request(url, headers=headers)
            for _ in range(5):
                size = len(urllib.request.urlopen(request, timeout=10).read())
            before = sum(server.cpu_times()[:2])
            for _ in range(scrapes):
                urllib.request.urlopen(request, timeout=10).read()
            out[name] = ((sum(server.cpu_times()[:2]) - before) / scrapes * 1e3, size)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _start_serving() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop", "serve", "--demo", "--interval", "1",
         "--metrics", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"(http://\S+/metrics)", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"gputop serve did not start: {line!r}")
    return proc, m.group(1)


def _scrape(url: str, timeout: float = 10.0) -> float | None:
    """Seconds one scrape took, None when it failed or took longer than `timeout`."""
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            if r.status != 200 or b"DCGM_FI_DEV_GPU_UTIL" not in r.read():
                return None
    except OSError:
        return None
    took = time.perf_counter() - start
    return took if took <= timeout else None


def _server_figures(proc: psutil.Process) -> str:
    return f"RSS {proc.memory_info().rss / 2**20:.0f} MiB, {proc.num_threads()} threads"


def _latency(took: list[float | None]) -> str:
    ok = sorted(t for t in took if t is not None)
    if not ok:
        return f"0 of {len(took)} answered"
    p99 = ok[min(len(ok) - 1, int(len(ok) * 0.99))]
    return (f"{len(took) - len(ok)} of {len(took)} failed or over 10 s; "
            f"median {statistics.median(ok) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms, "
            f"max {ok[-1] * 1e3:.0f} ms")


def load(rounds: int, concurrent: int, slow: int) -> None:
    proc, url = _start_serving()
    server = psutil.Process(proc.pid)
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    try:
        print(f"load on {url}  (cpus: {os.cpu_count()})")
        print(f"  at start:                          {_server_figures(server)}")
        took: list[float | None] = []
        with ThreadPoolExecutor(concurrent) as pool:
            for _ in range(rounds):
                took += list(pool.map(lambda _: _scrape(url), range(concurrent)))
        print(f"  {rounds} rounds of {concurrent} concurrent scrapes: {_latency(took)}")
        print(f"  after them:                        {_server_figures(server)}")
        held: list[socket.socket] = []
        refused = 0
        for _ in range(slow):
            try:
                s = socket.create_connection((host, int(port)), timeout=2)
                s.sendall(b"G")  # a request that never completes
                held.append(s)
            except OSError:
                refused += 1
        time.sleep(1.0)
        print(f"  {slow} slow clients holding ({refused} not connected): "
              f"{_server_figures(server)}")
        with ThreadPoolExecutor(10) as pool:
            during = list(pool.map(lambda _: _scrape(url), range(50)))
        print(f"  50 scrapes while they hold:        {_latency(during)}")
        for s in held:
            s.close()
        time.sleep(2.0)
        after = [_scrape(url) for _ in range(10)]
        print(f"  slow clients gone, 10 scrapes:     {_latency(after)}; "
              f"{_server_figures(server)}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", action="store_true", help="concurrent and slow clients")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--slow", type=int, default=2000)
    args = parser.parse_args()
    if args.load:
        load(args.rounds, args.concurrent, args.slow)
        return
    snaps = read_recording(demo_path()).snapshots[100:220]  # training: 8 GPUs busy, 18 links each
    snap = snaps[-1]
    print(f"8 GPUs: {len(snap.devices)} devices, {len(snap.processes)} processes, "
          f"{len(snap.links)} NVLink links  (cpus: {os.cpu_count()})")
    render_ms, size = render_cost(snap)
    http = http_scrape_cost()
    http_ms = http["prometheus"][0]
    demo_ms = demo_poll_cost()
    print(f"scrape, snapshot to text (in process):  {render_ms:6.2f} ms CPU, {size / 1024:.0f} KiB")
    for name, (ms, sent) in http.items():
        print(f"scrape over HTTP, {name + ':':<12} {ms:6.2f} ms CPU (server process), "
              f"{sent / 1024:.1f} KiB sent")
    print(f"poll, --demo (decode tick + diagnose):  {demo_ms:6.2f} ms CPU")
    for interval in (5.0, 15.0, 30.0):
        poll_ms, diagnose_ms = poll_cost(snaps, interval)
        per_window = (poll_ms + diagnose_ms) * SCRAPE_INTERVAL / interval + http_ms
        share = per_window / (SCRAPE_INTERVAL * 1e3) * 100
        print(f"--interval {interval:>2g}: poll (fake NVML + host) {poll_ms:5.1f} ms + diagnose "
              f"{diagnose_ms:4.1f} ms CPU  ->  {share:.2f} % of one core at a "
              f"{SCRAPE_INTERVAL:g} s scrape interval")

if __name__ == "__main__":
    main()
