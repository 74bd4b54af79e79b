"""Core figures: CPU per poll tick (8 GPUs, through the real pynvml binding over the recorded
fake library), one-shot wall time, and recording size per GPU-hour.

    python bench/core_bench.py

The fake library runs in Python, so the tick cost printed is an upper bound of what gputop adds
on a real node (a real NVML getter costs 2-50 µs, docs/diagnostics.md §0.11)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gputop.feeds.playback import demo_path
from gputop.recording import RecordingWriter, read_recording
from gputop.report.summary import SummaryKeeper
from gputop.sources.host import HostSource
from gputop.sources.nvml import NvmlSource
from gputop.sources.poller import Poller
from gputop.testing.fake_nvml import FakeNvml


def tick_cost(snaps: list, ticks: int = 300) -> tuple[float, float, float, list]:
    """Medians of a fast and a slow tick's CPU (ms), % of a core at 1 Hz, and what was polled."""
    with FakeNvml(snaps) as fake:
        clock = [1_800_000_000.0]  # one poll a second, as the dashboard does at --interval 1
        poller = Poller([NvmlSource(slow_interval=5.0)], HostSource(), clock=lambda: clock[0])
        poller.open()
        fast, slow, polled = [], [], []
        for t in range(ticks):
            clock[0] += 1.0
            start = time.process_time()
            polled.append(poller.poll_once())
            (slow if t % 5 == 0 else fast).append(time.process_time() - start)
            fake.advance()
        poller.close()
    mean_per_s = (sum(fast) + sum(slow)) / ticks
    return (statistics.median(fast) * 1e3, statistics.median(slow) * 1e3, mean_per_s * 100,
            polled)


def as_polled(snaps: list, polled: list) -> list:
    """The demo's ticks with the devices and links as the NVML source read them: the demo has
    every field every second, the source reads GPM, NVLink traffic, throttle-time counters, ECC
    and the like every 5 s. Processes and host stay the demo's (the fake serves no host)."""
    return [dataclasses.replace(s, devices=p.devices, links=p.links)
            for s, p in zip(snaps, polled)]


ONCE = """
import sys
from gputop.recording import read_recording
from gputop.feeds.playback import demo_path
from gputop.testing.fake_nvml import FakeNvml
from gputop.commands.main import main
from gputop.testing.synthetic import node
with FakeNvml([node(8, links=18)]):
    sys.exit(main(["--once"]))
"""


def once_wall(runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", ONCE], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def record_size(snaps: list, summary: bool = True) -> tuple[float, int, float]:
    """Bytes per GPU-hour, bytes, and ms of CPU to write a tick (with the file's summary for
    `gputop report`: the diagnostics run over every tick as written)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.gputop"
        start = time.process_time()
        with RecordingWriter(path, summarizer=SummaryKeeper() if summary else None) as w:
            for s in snaps:
                w.write(s)
        write_ms = (time.process_time() - start) / len(snaps) * 1e3
        size = os.path.getsize(path)
    seconds = snaps[-1].time - snaps[0].time + 1
    gpus = len(snaps[0].devices)
    return size / gpus * 3600 / seconds, size, write_ms


def main() -> None:
    snaps = read_recording(demo_path()).snapshots
    gpus = len(snaps[0].devices)
    fast_ms, slow_ms, cpu_pct, polled = tick_cost(snaps, len(snaps))
    print(f"poll tick, {gpus} GPUs, {len(snaps[0].processes)} processes, "
          f"{len(snaps[0].links)} NVLinks:")
    print(f"  fast tick median  {fast_ms:7.2f} ms CPU")
    print(f"  slow tick median  {slow_ms:7.2f} ms CPU (every 5 s)")
    print(f"  at 1 Hz           {cpu_pct:7.2f} % of one core")
    print(f"one-shot `gputop --once` wall time (incl. interpreter start): {once_wall():.2f} s")
    # The size without the file's summary, which is the same ~100 kB for 10 minutes or a day.
    per_hour, size, bare_ms = record_size(snaps, summary=False)
    _, _, write_ms = record_size(snaps)
    print(f"recording: {size} bytes for {len(snaps)} ticks x {gpus} GPUs -> "
          f"{per_hour / 1e3:.0f} kB per GPU-hour, {per_hour * 24 / 1e6:.2f} MB per GPU-day at 1 Hz")
    print(f"  writing a tick    {write_ms:7.2f} ms CPU, {bare_ms:.2f} without the summary for "
          "`gputop report`")
    per_hour, _, _ = record_size(as_polled(snaps, polled), summary=False)
    print(f"  as the NVML source polls it (slow fields every 5 s): {per_hour / 1e3:.0f} kB per "
          f"GPU-hour, {per_hour * 24 / 1e6:.2f} MB per GPU-day")


if __name__ == "__main__":
    main()
