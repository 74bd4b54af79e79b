"""CPU of the recorder's write path per tick, phase by phase: the record form of a Snapshot, the
rounding, the merge patch, the JSON line and its compression, and the summary for
`gputop report` (the patch applied, the tick decoded back, the recap); the diagnostics that the
summary runs are shown apart. 8 H100s of the bundled demo, with the devices and NVLinks as the
NVML source polls them over the recorded fake library (links handed again between slow ticks).

    python bench/record_bench.py [--ticks N] [--level L] [--strategy default|filtered]

Thread CPU time, the least of --runs runs over the same ticks."""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core_bench import as_polled, tick_cost

from gputop.diagnose.engine import Engine
from gputop.feeds.playback import demo_path
from gputop.recording import format as record_format
from gputop.recording import read_recording
from gputop.recording import writer as record_writer
from gputop.report import recap, summary

STRATEGIES = {"default": zlib.Z_DEFAULT_STRATEGY, "filtered": zlib.Z_FILTERED}
PHASES: list[tuple[Any, str, str]] = [
    (record_writer, "to_record", "record form"),
    (record_writer, "round_to_sensor", "rounding"),
    (record_writer, "diff", "merge patch"),
    (record_writer, "_line", "JSON line"),
    (summary, "apply", "summary: patch applied"),
    (record_format.SnapshotDecoder, "decode", "summary: tick decoded"),
    (recap.Recap, "add", "summary: recap"),
    (Engine, "update", "diagnostics (not the writer's)"),
]


def timed(spent: dict[str, float], label: str, f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def run(*a: Any, **k: Any) -> Any:
        start = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            spent[label] += time.thread_time() - start
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--level", type=int, default=record_writer.COMPRESSION_LEVEL)
    ours = getattr(record_writer, "COMPRESSION_STRATEGY", zlib.Z_DEFAULT_STRATEGY)  # or older
    ap.add_argument("--strategy", choices=STRATEGIES,
                    default=next(k for k, v in STRATEGIES.items() if v == ours))
    args = ap.parse_args()
    snaps = read_recording(demo_path()).snapshots[:args.ticks]
    ticks = as_polled(snaps, tick_cost(snaps, len(snaps))[3])
    record_writer.COMPRESSION_LEVEL = args.level
    record_writer.COMPRESSION_STRATEGY = STRATEGIES[args.strategy]
    spent: dict[str, float] = defaultdict(float)
    for owner, name, label in PHASES:
        setattr(owner, name, timed(spent, label, getattr(owner, name)))
    best: dict[str, float] = {}
    for _ in range(args.runs):
        spent.clear()
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "bench.gputop"
            w = record_writer.RecordingWriter(path, summarizer=summary.SummaryKeeper())
            start = time.thread_time()
            for s in ticks:
                w.write(s)
            spent["write (all)"] = time.thread_time() - start
            w.close()
            size = os.path.getsize(path)
        for k, v in spent.items():
            best[k] = min(best.get(k, v), v)
    n = len(ticks)
    print(f"recorder write path, {len(ticks[0].devices)} GPUs, {len(ticks[0].links)} NVLinks, "
          f"{n} ticks, zlib level {args.level} {args.strategy}: thread CPU per tick, least of "
          f"{args.runs} runs")
    for _, _, label in PHASES:
        print(f"  {label:32s} {best[label] / n * 1e3:6.3f} ms")
    rest = best["write (all)"] - sum(best[label] for _, _, label in PHASES)
    print(f"  {'compression, writing, the rest':32s} {rest / n * 1e3:6.3f} ms")
    print(f"  {'write (all)':32s} {best['write (all)'] / n * 1e3:6.3f} ms")
    own = best["write (all)"] - best["diagnostics (not the writer's)"]
    print(f"  {'write, less the diagnostics':32s} {own / n * 1e3:6.3f} ms")
    print(f"file: {size} bytes ({size / n:.0f} a tick)")


if __name__ == "__main__":
    main()
