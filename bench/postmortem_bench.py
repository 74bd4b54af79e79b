"""Postmortem figures for a day-long recording: its size, the time to write it, and what
`gputop report` costs over it (wall time and peak memory), both from the summary the writer
appends to the file and tick by tick, as over a file without one (its copy cut before it).

    python bench/postmortem_bench.py              # 24 h of an 8-GPU node at 1 Hz
    python bench/postmortem_bench.py --hours 1    # quicker
    python bench/postmortem_bench.py --no-scan    # skip the tick-by-tick report (minutes)
    python bench/postmortem_bench.py --keep run.gputop   # keep the recording
    python bench/postmortem_bench.py --recording run.gputop --html   # report on a kept one

The day is the bundled demo's ten minutes played over and over (each pass retimed, with its
processes running on, energy and clock-event counters carried on, and a little noise on the
device readings so no two passes are the same; NVLink error counters restart each pass),
written through RecordingWriter as `gputop --record` would, then reported on by
`gputop report` in a child process, as a user would run it.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gputop.feeds.playback import demo_path
from gputop.model import DeviceSample, Missing, Snapshot
from gputop.recording import RecordingWriter, read_recording, summary_place
from gputop.report.summary import SummaryKeeper


def counters(demo: list[Snapshot]) -> dict[int, tuple[float, dict[str, float]]]:
    """GPU -> how much its energy and clock-event counters grow over one pass of the demo."""
    first, last = demo[0], demo[-1]
    out = {}
    for d in last.devices:
        d0 = first.device(d.index)
        energy = (d.energy_j - d0.energy_j if d0 is not None
                  and isinstance(d.energy_j, float) and isinstance(d0.energy_j, float) else 0.0)
        tt, tt0 = d.throttle_time, d0.throttle_time if d0 is not None else {}
        held = ({r: v - (tt0.get(r, 0.0) if isinstance(tt0, Mapping) else 0.0)
                 for r, v in tt.items()} if isinstance(tt, Mapping) else {})
        out[d.index] = (energy, held)
    return out


def jitter(d: DeviceSample, rng: random.Random, n: int,
           grown: tuple[float, dict[str, float]]) -> DeviceSample:
    """The same GPU on the `n`th pass: cumulative counters carried on from the passes before
    (a pass that restarted them would read as a driver reload), a little noise on the rest."""
    changes: dict[str, Any] = {}
    energy, held = grown
    if isinstance(d.energy_j, float):
        changes["energy_j"] = round(d.energy_j + n * energy, 3)
    if isinstance(d.throttle_time, Mapping):
        changes["throttle_time"] = {r: round(v + n * held.get(r, 0.0), 3)
                                    for r, v in d.throttle_time.items()}
    for name, spread, lo, hi in (("util_gpu", 2.0, 0.0, 100.0), ("power_draw", 8.0, 0.0, 1e4),
                                 ("temp_gpu", 1.0, 0.0, 200.0), ("gr_active", 2.0, 0.0, 100.0)):
        v = getattr(d, name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            nv = min(hi, max(lo, v + rng.uniform(-spread, spread)))
            changes[name] = round(nv) if isinstance(v, int) else round(nv, 1)
    return dataclasses.replace(d, **changes)


def retimed(s: Snapshot, n: int, offset: float, rng: random.Random,
            grown: dict[int, tuple[float, dict[str, float]]]) -> Snapshot:
    procs = []
    for p in s.processes:
        if p.probe is not None:  # the probe's payload carries its own time
            p = dataclasses.replace(p, probe=dataclasses.replace(p.probe, ts=p.probe.ts + offset))
        procs.append(p)
    return dataclasses.replace(s, time=s.time + offset, processes=tuple(procs),
                               devices=tuple(jitter(d, rng, n, grown.get(d.index, (0.0, {})))
                                             for d in s.devices))


def day(demo: list[Snapshot], ticks: int, seed: int = 7) -> Iterator[Snapshot]:
    """`ticks` Snapshots, one a second: the demo over and over."""
    rng = random.Random(seed)
    period = demo[-1].time - demo[0].time + (demo[1].time - demo[0].time)
    grown = counters(demo)
    for i in range(ticks):
        n, k = divmod(i, len(demo))
        yield retimed(demo[k], n, n * period, rng, grown)


def write(path: Path, demo: list[Snapshot], ticks: int) -> float:
    start = time.perf_counter()
    with RecordingWriter(path, meta={"synthetic": True, "bench": "postmortem"},
                         summarizer=SummaryKeeper()) as w:
        for s in day(demo, ticks):
            w.write(s)
    return time.perf_counter() - start


def ticks_end(path: Path) -> int | None:
    """Where the file's summary starts, or None when it has none."""
    place = summary_place(path)
    return None if place is None else place[0]


def without_summary(path: Path, out: Path) -> None:
    """A copy of the recording as a writer that appends no summary leaves it."""
    end = ticks_end(path)
    with open(path, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
        if end is not None:
            dst.truncate(end)


# `gputop report` as a user runs it, then its own peak RSS: /proc's VmHWM starts again at exec,
# unlike ru_maxrss, which keeps the high-water mark of the forked bench before it.
CHILD = """
import sys
from gputop.commands.main import main
try:
    rc = main(sys.argv[1:])
finally:
    try:
        with open("/proc/self/status") as f:
            kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
        print(f"peak-rss-kib {kib}", file=sys.stderr)
    except OSError:
        pass
sys.exit(rc)
"""


def report(path: Path, *extra: str) -> tuple[float, float | None, str]:
    """(wall s, peak RSS MiB or None where it cannot be read, what it printed) of
    `gputop report` over the recording."""
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", CHILD, "report", str(path), *extra],
                       capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"gputop report failed: {r.stderr.strip()}")
    peaks = [int(line.split()[1]) / 1024 for line in r.stderr.splitlines()
             if line.startswith("peak-rss-kib ")]
    return wall, peaks[-1] if peaks else None, r.stdout


def mib(peak: float | None) -> str:
    return "?" if peak is None else f"{peak:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=24.0, help="length of the recording (24)")
    ap.add_argument("--keep", metavar="PATH", help="keep the recording at PATH")
    ap.add_argument("--recording", metavar="PATH",
                    help="report on this recording (one this bench kept) instead of writing one")
    ap.add_argument("--html", action="store_true", help="also time report --html")
    ap.add_argument("--no-scan", action="store_true",
                    help="skip the report that reads every tick (minutes for a day)")
    args = ap.parse_args()

    demo = read_recording(demo_path()).snapshots
    gpus = len(demo[0].devices)
    ticks = int(args.hours * 3600)
    missing = sum(isinstance(p.create_time, Missing) for p in demo[0].processes)
    tmp = Path(tempfile.mkdtemp(prefix="gputop-bench-"))
    try:
        path = tmp / "day.gputop"
        print(f"recording: {ticks} ticks ({args.hours:g} h at 1 Hz), {gpus} GPUs, "
              f"{len(demo[0].processes)} processes ({missing} without a start time), "
              f"{len(demo[0].links)} links", flush=True)
        if args.recording:
            path = Path(args.recording)
        else:
            wrote = write(path, demo, ticks)
            print(f"write:     {wrote:.1f} s ({wrote / ticks * 1e3:.2f} ms a tick)")
        size = path.stat().st_size
        end = ticks_end(path)
        gpu_days = gpus * args.hours / 24
        print(f"size:      {size / 1e6:.1f} MB, {size / gpu_days / 1e6:.2f} MB per GPU-day, "
              f"{size / ticks:.0f} B a tick"
              + (f"; its summary {(size - end) / 1e3:.0f} kB" if end is not None else
                 "; no summary"))
        wall, peak, head = report(path)
        print(f"report:    {wall:.2f} s wall, peak RSS {mib(peak)} MiB"
              + (" (from the summary)" if end is not None else " (tick by tick)"))
        if args.html:
            out = tmp / "day.html"
            wall, _, _ = report(path, "--html", str(out))
            print(f"report --html: {wall:.2f} s wall, {out.stat().st_size / 1e6:.2f} MB page")
        if end is not None and not args.no_scan:
            old = tmp / "day-without-summary.gputop"
            without_summary(path, old)
            wall, peak, scan_head = report(old)
            print(f"report tick by tick: {wall:.1f} s wall ({wall / ticks * 1e3:.2f} ms a tick), "
                  f"peak RSS {mib(peak)} MiB")
            same = scan_head.replace(str(old), str(path)) == head
            print(f"  the same report as from the summary: {'yes' if same else 'NO'}")
            if args.html:
                out = tmp / "day-scan.html"
                wall, _, _ = report(old, "--html", str(out))
                print(f"report --html tick by tick: {wall:.1f} s wall")
        print("\n".join(head.splitlines()[:2]))
        if args.keep and not args.recording:
            shutil.copyfile(path, args.keep)
            print(f"kept:      {args.keep}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
