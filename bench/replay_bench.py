"""`gputop replay` on a long recording: how long opening takes, how long a seek takes before the
Snapshot is on screen, and before the Findings are those of that moment.

    python bench/replay_bench.py                    # a 24 h, 8-GPU recording; diagnoses 1 h of it
    python bench/replay_bench.py --hours 6 --diagnose-hours 6
    python bench/replay_bench.py --keep /tmp/day.gputop    # reuse the generated file next time
    python bench/replay_bench.py --segments 12      # the same day in 12 files, as --record-max-size

The recording is the bundled demo (600 ticks of 8x H100, one a second) repeated and moved on in
time until it lasts `--hours`, written the way `gputop --record` writes (a keyframe every 300
ticks, the stream flushed after every tick). Findings at a tick need the engine to have seen
every tick before it once; that first pass is timed over `--diagnose-hours` and extrapolated to
the middle and the end of the recording (the figures say when they are extrapolated). With
`--segments N` the recording is N files of a series, each starting at a keyframe, replayed as
one run as `gputop replay` does."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

from gputop.diagnose import default_engine
from gputop.feeds.playback import demo_path
from gputop.recording import COMPRESSION_LEVEL
from gputop.recording.series_index import SeriesIndex
from gputop.replay.control import ReplayFeed
from gputop.replay.seek import parse_seek
from gputop.replay.timeline import FindingsTimeline

_TIME = re.compile(rb'"time":(-?[0-9][0-9.eE+-]*)')


def make_recording(path: Path, hours: float, segments: int = 1) -> int:
    """Writes the demo repeated for `hours`, in `segments` files; returns the number of ticks."""
    header, *lines = gzip.decompress(demo_path().read_bytes()).split(b"\n")[:-1]
    ticks = [line for line in lines if line.startswith((b'{"k"', b'{"d"'))]  # not the summary
    n = int(hours * 3600)
    per_file = -(-n // segments)
    f, z, segment = None, None, -1
    try:
        for i in range(n):
            line = ticks[i % len(ticks)]
            if f is None or (segment < segments - 1 and i >= (segment + 1) * per_file
                             and line.startswith(b'{"k"')):  # a file starts at a keyframe
                if f is not None and z is not None:
                    f.write(z.flush(zlib.Z_FINISH))
                    f.close()
                segment += 1
                f = path.with_name(f"{path.name}.{segment}" if segment else path.name).open("wb")
                z = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, 31)
                head = json.loads(header)
                if segments > 1:
                    head.update(series="bench", segment=segment)
                f.write(z.compress(json.dumps(head).encode() + b"\n")
                        + z.flush(zlib.Z_SYNC_FLUSH))
            assert z is not None
            m = _TIME.search(line)
            assert m is not None
            t = float(m.group(1)) + (i // len(ticks)) * len(ticks)  # one tick a second
            line = line[:m.start(1)] + repr(round(t, 3)).encode() + line[m.end(1):]
            f.write(z.compress(line + b"\n") + z.flush(zlib.Z_SYNC_FLUSH))
        if f is not None and z is not None:
            f.write(z.flush(zlib.Z_FINISH))
    finally:
        if f is not None:
            f.close()
    return n


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--diagnose-hours", type=float, default=1.0)
    p.add_argument("--keep", metavar="PATH", help="write the recording here and reuse it")
    p.add_argument("--segments", type=int, default=1, metavar="N",
                   help="write the recording as N files of a series")
    args = p.parse_args()

    tmp = None
    if args.keep:
        path = Path(args.keep)
    else:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "day.gputop"
    if not path.exists():
        made, n = timed(make_recording, path, args.hours, args.segments)
        size = sum(f.stat().st_size for f in path.parent.glob(f"{path.name}*"))
        print(f"wrote {path}: {n:,} ticks ({args.hours:g} h of 8 GPUs), "
              f"{size / 2**20:,.0f} MiB, in {ms(made)}")

    # -- opening ---------------------------------------------------------------------------------
    before = rss_mib()
    opened, index = timed(SeriesIndex, path)
    n = index.ticks
    resume = sum(len(s._cp_ticks) for s in index.segments)
    print(f"\nopen (index {n:,} ticks in {len(index.segments)} file(s), {resume} resume "
          f"points): {ms(opened)}, +{rss_mib() - before:,.0f} MiB resident")
    if index.warning:
        print(f"  warning: {index.warning}")

    # -- the Snapshot on screen ------------------------------------------------------------------
    mid, end = n // 2, n - 1
    feed = ReplayFeed(index, paused=True, engine=default_engine(plugins=False))
    print("\nseek, until the Snapshot is on screen (a fresh reader each time):")
    for name, tick in (("middle", mid), ("end", end), ("middle + 1 h", min(end, mid + 3600))):
        reader = index.reader()
        took, _ = timed(feed._frame, reader, None, tick)
        reader.close()
        text = time.strftime("%H:%M:%S", time.localtime(index.time(tick)))
        assert parse_seek(text, index.times, 0) in (tick - 1, tick, tick + 1)
        print(f"  {name:<14} (tick {tick + 1:,}): {ms(took)} with the last minute of the graphs")
    reader = index.reader()
    reader.snapshot(mid)
    steps = [timed(reader.snapshot, mid + k)[0] for k in range(1, 61)]
    print(f"  next tick while playing: median {ms(statistics.median(steps))}")
    reader.close()

    # -- the Findings of that moment -------------------------------------------------------------
    span = min(n, int(args.diagnose_hours * 3600))
    timeline = FindingsTimeline(index, default_engine(plugins=False), remember=1)
    before = rss_mib()
    passed, _ = timed(timeline.at, span - 1)
    per_tick = passed / span
    print(f"\nFindings, the first time a stretch is seen (the engine runs over every tick before "
          f"it once, {1 / per_tick:,.0f} ticks/s over {span:,} ticks"
          f"{'' if span == n else ', then extrapolated'}):")
    for name, tick in (("middle", mid), ("end", end)):
        real = " (measured)" if tick < span else " (extrapolated)"
        print(f"  {name:<14} (tick {tick + 1:,}): {ms(per_tick * (tick + 1))}{real}")
    print(f"  saved engine states: {timeline.saved} ({rss_mib() - before:,.0f} MiB resident "
          f"with the decoded ticks cached)")
    for back in (300, 3000):
        if back < span:
            took, _ = timed(timeline.at, span - 1 - back)
            print(f"  then {back // 60} min back: {ms(took)}")
            timeline.at(span - 1)
    random.seed(1)
    targets = [random.randrange(0, span) for _ in range(20)]
    lat = []
    for t in targets:
        took, _ = timed(timeline.at, t)
        lat.append(took)
    print(f"\nFindings after a seek into a stretch already seen ({len(targets)} random seeks in "
          f"the first {span:,} ticks): median {ms(statistics.median(lat))}, "
          f"max {ms(max(lat))}, {timeline.restores} restores")
    timeline.close()
    timeline = FindingsTimeline(index, default_engine(plugins=False))
    timeline.at(min(span - 1, 1200))
    took, _ = timed(timeline.at, min(span - 1, 1200) - 1)
    print(f"  one tick back (remembered): {ms(took)}")
    timeline.close()
    feed.close()
    index.close()
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
