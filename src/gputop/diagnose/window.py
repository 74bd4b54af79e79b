"""Small pure helpers that read series out of a window of Snapshots, for the rules.

A window is any sequence of Snapshots, oldest first: a plain list in a test. The engine hands
the rules a `Window` over its history instead, where what a helper reads out of a tick (a
device's utilization, its clock-event bits...) is read once per tick and shared by every rule
and every later window that holds the tick: each rule looks at a minute or more of ticks every
few seconds, and over a day-long recording reading each tick again every time is what costs.
A column keeps its values only as far back as its reads reach (most rules look back a minute
or five of the ten minutes the history holds); one that reaches further works them out again.
The history also notes which ticks read as missing, so that a window with none hands out its
values as they are, and a figure of a window that several rules ask for in the same tick (a
mean, a counter's growth) is worked out once.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from gputop.model import DeviceSample, Missing, ProcessSample, Snapshot

Point = tuple[float, float]  # (epoch s, value)
# What a column keeps beyond the longest read of it: the next read's window starts a tick or
# two later, but ticks come unevenly.
TRIM_MARGIN_S = 5.0
# How often the columns are trimmed, in the ticks' time: a column keeps up to this much more.
TRIM_EVERY_S = 30.0


class History:
    """The ticks the engine keeps, oldest first, with the values read out of them so far."""

    def __init__(self) -> None:
        self.snaps: list[Snapshot] = []
        self.times: list[float] = []
        # (function, args) -> [function(tick, *args) for consecutive ticks of `snaps`], from the
        # tick `starts[key]` on (0 unless `trim_columns` dropped the older ones)
        self.columns: dict[tuple[Any, ...], list[Any]] = {}
        self.starts: dict[tuple[Any, ...], int] = {}
        # (function, args) -> the longest time back from the newest tick that a read of the
        # column has reached: how much of it to keep
        self.reach: dict[tuple[Any, ...], float] = {}
        self.trimmed_at = -math.inf  # the newest tick when the columns were last trimmed
        # (function, args) -> the ticks where its column holds None, in order, each counted from
        # the first tick ever taken: most columns have none, and a window without one hands out
        # its values without looking at each
        self.gaps: dict[tuple[Any, ...], list[int]] = {}
        self.dropped = 0  # ticks forgotten so far
        # (function, start, stop, args) -> what a pure function of those ticks gave, until the
        # ticks change: several rules ask the same figure of the same ticks
        self.results: dict[tuple[Any, ...], Any] = {}
        self.linked = 0  # the ticks before this one have had their links dropped

    def __len__(self) -> int:
        return len(self.snaps)

    def append(self, snap: Snapshot) -> None:
        self.snaps.append(snap)
        self.times.append(snap.time)
        self.results.clear()

    def forget_before(self, t: float) -> None:
        """Drops the ticks older than `t`."""
        n = bisect.bisect_left(self.times, t)
        if not n:
            return
        del self.snaps[:n], self.times[:n]
        self.linked = max(0, self.linked - n)
        self.results.clear()
        starts = self.starts
        for key, col in list(self.columns.items()):
            start = starts.get(key, 0)
            if start >= n:
                starts[key] = start - n
                continue
            del col[:n - start]
            starts.pop(key, None)
            if not col:  # read from no tick left (a process that exited): forget it
                del self.columns[key]
                self.reach.pop(key, None)
        self.dropped += n
        for key, gaps in list(self.gaps.items()):
            if gaps[-1] < self.dropped or key not in self.columns:
                del self.gaps[key]
            elif gaps[0] < self.dropped:
                del gaps[:bisect.bisect_left(gaps, self.dropped)]

    def drop_links_before(self, t: float) -> None:
        """Empties the links of the ticks older than `t`, which no rule that reads links looks
        back to: on an NVLink node they are most of what a tick holds."""
        n = bisect.bisect_left(self.times, t)
        snaps = self.snaps
        for i in range(self.linked, n):
            if snaps[i].links:
                snaps[i] = dataclasses.replace(snaps[i], links=())
        if n > self.linked:
            self.linked = n
            self.results.clear()

    def trim_columns(self) -> None:
        """Drops each column's values older than any read of it has reached back (and a
        margin), every TRIM_EVERY_S: a column that only the one-minute rules read keeps a
        minute of the ten the history holds. A read that reaches further later (a rule that
        reads it only now and then) works the dropped values out again from the ticks, so
        every read gets the same values as if none had been dropped."""
        times = self.times
        if not times or times[-1] - self.trimmed_at < TRIM_EVERY_S:
            return
        newest = self.trimmed_at = times[-1]
        starts, reach = self.starts, self.reach
        for key, col in self.columns.items():
            keep = bisect.bisect_left(times, newest - reach.get(key, 0.0) - TRIM_MARGIN_S)
            start = starts.get(key, 0)
            if keep > start:
                keep = min(keep, start + len(col))
                del col[:keep - start]
                starts[key] = keep

    def since(self, t: float) -> Window:
        """The ticks at or after `t`."""
        return Window(self, bisect.bisect_left(self.times, t), len(self.snaps), t)


class Window(Sequence[Snapshot]):
    """Consecutive ticks of a `History`, oldest first. Valid while the engine runs one tick."""

    __slots__ = ("_a", "_b", "_from", "_h")

    def __init__(self, history: History, start: int, stop: int,
                 since: float | None = None) -> None:
        """`since`: the time the window was asked to start at, which may be before the oldest
        tick the history holds yet (the columns are kept back to it: trim_columns)."""
        self._h, self._a, self._b = history, start, max(start, stop)
        self._from = since

    def __len__(self) -> int:
        return self._b - self._a

    @overload
    def __getitem__(self, i: int) -> Snapshot: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Snapshot]: ...

    def __getitem__(self, i: int | slice) -> Snapshot | Sequence[Snapshot]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._b - self._a)
            if step != 1:
                return self._h.snaps[self._a:self._b][i]
            return Window(self._h, self._a + start, self._a + stop)
        n = self._b - self._a
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("window index out of range")
        return self._h.snaps[self._a + i]

    def __iter__(self) -> Iterator[Snapshot]:
        return itertools.islice(self._h.snaps, self._a, self._b)

    def __reversed__(self) -> Iterator[Snapshot]:
        return reversed(self._h.snaps[self._a:self._b])

    @property
    def times(self) -> list[float]:
        return self._h.times[self._a:self._b]

    def since(self, t: float) -> Window:
        if self._from is not None and t < self._from:
            t = self._from
        return Window(self._h, bisect.bisect_left(self._h.times, t, self._a, self._b), self._b, t)

    def last(self, seconds: float) -> Window:
        """The tail no older than `seconds` before the newest tick (`last`)."""
        if self._b == self._a:
            return self
        times = self._h.times
        t = times[self._b - 1] - seconds
        if self._from is not None and t < self._from:
            t = self._from
        return Window(self._h, bisect.bisect_left(times, t, self._a, self._b), self._b, t)

    # The columns, by key: (function, *args) -> [function(tick, *args) for each tick]. The
    # helpers below call these directly: they run hundreds of times a tick.

    def _column(self, key: tuple[Any, ...]) -> list[Any]:
        col, start = self._read(key)
        return col[self._a - start:self._b - start]

    def _present(self, key: tuple[Any, ...]) -> list[Any]:
        """The column without its Nones."""
        col, start = self._read(key)
        a, b = self._a, self._b
        none = self._nones(key)
        if none == b - a:
            return []
        values = col[a - start:b - start]
        return [v for v in values if v is not None] if none else values

    def _readings(self, key: tuple[Any, ...]) -> tuple[list[float], list[Any]]:
        """The times where the column is not None, and its values there."""
        col, start = self._read(key)
        a, b = self._a, self._b
        none = self._nones(key)
        if none == b - a:
            return [], []
        times = self._h.times
        if not none:
            return times[a:b], col[a - start:b - start]
        keep = [i for i in range(a, b) if col[i - start] is not None]
        return [times[i] for i in keep], [col[i - start] for i in keep]

    def _nones(self, key: tuple[Any, ...]) -> int:
        """How many of this window's ticks the column (read) holds None at."""
        gaps = self._h.gaps.get(key)
        if not gaps:
            return 0
        first = self._h.dropped
        return bisect.bisect_left(gaps, first + self._b) - bisect.bisect_left(gaps, first + self._a)

    def _read(self, key: tuple[Any, ...]) -> tuple[list[Any], int]:
        """The column, read up to this window's newest tick and back to its oldest, and the
        tick its first value is of."""
        h = self._h
        a, b = self._a, self._b
        col = h.columns.get(key)
        if col is None:
            col = h.columns[key] = []
        start = h.starts.get(key, 0) if h.starts else 0
        if a >= b:
            return col, start
        if start + len(col) < b:
            fn, *args = key
            for i in range(start + len(col), b):  # the ticks not read yet: usually the newest
                v = fn(h.snaps[i], *args)
                if v is None:
                    h.gaps.setdefault(key, []).append(h.dropped + i)
                col.append(v)
        if a < start:  # dropped by trim_columns: the same values again (their gaps kept)
            fn, *args = key
            col[:0] = [fn(h.snaps[i], *args) for i in range(a, start)]
            start = h.starts[key] = a
        back = h.times[-1] - (h.times[a] if self._from is None else self._from)
        if back > h.reach.get(key, 0.0):
            h.reach[key] = back
        return col, start


def column(window: Sequence[Snapshot], fn: Callable[..., Any], *args: Any) -> list[Any]:
    """`fn(tick, *args)` for each tick of the window. Under the engine each tick is read once,
    so `fn` must be a pure function of the tick and `args`, and one function serves one purpose."""
    if isinstance(window, Window):
        return window._column((fn, *args))
    return [fn(s, *args) for s in window]


def times(window: Sequence[Snapshot]) -> list[float]:
    return window.times if isinstance(window, Window) else [s.time for s in window]


def span(window: Sequence[Snapshot]) -> float:
    return window[-1].time - window[0].time if len(window) > 1 else 0.0


def last(window: Sequence[Snapshot], seconds: float) -> Sequence[Snapshot]:
    """The tail of `window` no older than `seconds` before its newest tick."""
    if isinstance(window, Window):
        return window.last(seconds)
    if not window:
        return window
    t0 = window[-1].time - seconds
    i = len(window)
    while i > 0 and window[i - 1].time >= t0:
        i -= 1
    return window[i:]


def covers(window: Sequence[Snapshot], seconds: float, share: float = 0.8) -> bool:
    """Whether the window holds enough history to judge `seconds` of it."""
    return span(window) >= share * seconds


def device_at(snap: Snapshot, index: int) -> DeviceSample | None:
    """The device with this index at this tick, unless it is lost."""
    devs = snap.devices
    # Sources list devices in index order; the search is for a filtered or partial list.
    d = devs[index] if index < len(devs) and devs[index].index == index else snap.device(index)
    return None if d is None or d.lost is not None else d


def devices(window: Sequence[Snapshot]) -> list[int]:
    """Indexes of the devices in the newest tick."""
    return [d.index for d in window[-1].devices] if window else []


def number(v: object) -> float | None:
    """A finite float, or None for a Missing (or anything that is not a number)."""
    t = type(v)  # exact types: a bool is not a number here, and this runs per point
    if t is float:
        return v if math.isfinite(v) else None  # type: ignore[arg-type,return-value]
    if t is int:
        return float(v)  # type: ignore[arg-type]
    return None


def _point(s: Snapshot, index: int, name: str) -> Point | None:
    devs = s.devices  # the rules' inner loop: `device_at` and `number` inlined
    d = devs[index] if index < len(devs) and devs[index].index == index else s.device(index)
    if d is None or d.lost is not None:
        return None
    v = getattr(d, name)
    t = type(v)
    if (t is float and math.isfinite(v)) or t is int:
        return (s.time, float(v))
    return None


def _value(s: Snapshot, index: int, name: str) -> float | None:
    devs = s.devices  # as _point
    d = devs[index] if index < len(devs) and devs[index].index == index else s.device(index)
    if d is None or d.lost is not None:
        return None
    v = getattr(d, name)
    t = type(v)
    if (t is float and math.isfinite(v)) or t is int:
        return float(v)
    return None


def readings(window: Sequence[Snapshot], fn: Callable[..., Any],
             *args: Any) -> tuple[list[float], list[Any]]:
    """The times of the ticks where `fn(tick, *args)` is not None, and what it gave there (the
    same purity as `column`)."""
    if isinstance(window, Window):
        return window._readings((fn, *args))
    col = [fn(s, *args) for s in window]
    keep = [i for i, v in enumerate(col) if v is not None]
    return [window[i].time for i in keep], [col[i] for i in keep]


def series(window: Sequence[Snapshot], index: int, name: str) -> list[Point]:
    """(time, value) of one device field, skipping ticks where it is missing."""
    return present(window, _point, index, name)


def field_values(window: Sequence[Snapshot], index: int, name: str) -> list[float]:
    """`values(series(...))`, without building the points."""
    return present(window, _value, index, name)


def field_readings(window: Sequence[Snapshot], index: int,
                   name: str) -> tuple[list[float], list[float]]:
    """`series(...)` as its times and its values."""
    return readings(window, _value, index, name)


def present(window: Sequence[Snapshot], fn: Callable[..., Any], *args: Any) -> list[Any]:
    """`column(window, fn, *args)` without its Nones."""
    if isinstance(window, Window):
        return window._present((fn, *args))
    col = [fn(s, *args) for s in window]
    return col if None not in col else [v for v in col if v is not None]


def busy_series(window: Sequence[Snapshot], index: int) -> tuple[str, list[Point]]:
    """GPM `gr_active` where the GPU has it, else NVML utilization (docs/diagnostics.md §8 R1: NVML
    util counts copies as busy, gr_active is time-based kernel activity)."""
    gr = series(window, index, "gr_active")
    if gr and len(gr) * 2 >= len(window):
        return "gr_active", gr
    return "util_gpu", series(window, index, "util_gpu")


def busy_values(window: Sequence[Snapshot], index: int) -> tuple[str, list[float]]:
    """`busy_series` without the times."""
    gr = field_values(window, index, "gr_active")
    if gr and len(gr) * 2 >= len(window):
        return "gr_active", gr
    return "util_gpu", field_values(window, index, "util_gpu")


def field_mean(window: Sequence[Snapshot], index: int, name: str) -> float | None:
    """`mean(field_values(window, index, name))`."""
    got: float | None = _once(window, _field_mean, index, name)
    return got


def _field_mean(window: Sequence[Snapshot], index: int, name: str) -> float | None:
    return mean(field_values(window, index, name))


def busy_mean(window: Sequence[Snapshot], index: int) -> tuple[str, float | None]:
    """The metric of `busy_values` and the mean of its values."""
    got: tuple[str, float | None] = _once(window, _busy_mean, index)
    return got


def _busy_mean(window: Sequence[Snapshot], index: int) -> tuple[str, float | None]:
    metric, vals = busy_values(window, index)
    return metric, mean(vals)


def values(points: Iterable[Point]) -> list[float]:
    return [v for _, v in points]


def mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def median(xs: Sequence[float]) -> float | None:
    return percentile(xs, 50.0)


def percentile(xs: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile, q in 0..100."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def increase(points: Sequence[Point]) -> float:
    """How much a cumulative counter grew; a drop is a reset (driver reload), not a negative."""
    return growth([v for _, v in points])


def growth(vals: Sequence[float]) -> float:
    """`increase` of the counter's readings alone."""
    if not vals or vals.count(vals[0]) == len(vals):  # the usual case: it held still
        return 0.0
    total = 0.0
    for a, b in itertools.pairwise(vals):
        total += b - a if b >= a else b
    return total


def _throttle_point(s: Snapshot, index: int, reason: str) -> Point | None:
    d = device_at(s, index)
    tt = d.throttle_time if d is not None else None
    if tt is not None and not isinstance(tt, Missing) and reason in tt:
        v = number(tt[reason])
        if v is not None:
            return (s.time, v)
    return None


def throttle_series(window: Sequence[Snapshot], index: int, reason: str) -> list[Point]:
    """Cumulative seconds of one clock-event reason, where the device counts them."""
    return [p for p in column(window, _throttle_point, index, reason) if p is not None]


def counter_growth(window: Sequence[Snapshot], index: int,
                   reason: str) -> tuple[float, float] | None:
    """(seconds a clock-event counter grew, seconds of window it covers), from its oldest and
    newest readings; a drop between them is a reset (driver reload), counted from zero."""
    got: tuple[float, float] | None = _once(window, _counter_growth, index, reason)
    return got


def _once(window: Sequence[Snapshot], fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(window, *args)`, worked out once per tick for the engine's windows: several rules ask
    the same figure of the same ticks. `fn` must be a pure function of the window and `args`
    that returns what cannot be changed in place (a number, a tuple)."""
    if not isinstance(window, Window):
        return fn(window, *args)
    key = (fn, window._a, window._b, *args)
    results = window._h.results
    if key not in results:
        results[key] = fn(window, *args)
    return results[key]


def _counter_growth(window: Sequence[Snapshot], index: int,
                    reason: str) -> tuple[float, float] | None:
    points = present(window, _throttle_point, index, reason)
    if not points:
        return None
    (t0, a), (t1, b) = points[0], points[-1]
    if t1 <= t0:
        return None
    return (b - a if b >= a else b), t1 - t0


def _bits(s: Snapshot, index: int) -> tuple[str, ...] | None:
    """The clock-event bits of a device at a tick; None where it is lost or does not say."""
    d = device_at(s, index)
    return None if d is None or isinstance(d.throttle, Missing) else d.throttle


def _bit(s: Snapshot, index: int, reason: str) -> bool | None:
    """Whether a clock-event bit is set at a tick; None where the device does not say."""
    bits = _bits(s, index)
    return None if bits is None else reason in bits


def reason_share(window: Sequence[Snapshot], index: int, reason: str) -> float | None:
    """Share of the window's time a clock-event reason held the clock: from the cumulative
    counter where there is one (precise), else from the share of ticks with the bit set."""
    grown = counter_growth(window, index, reason)
    if grown is not None:
        return min(1.0, grown[0] / grown[1])
    bits = present(window, _bit, index, reason)
    return sum(bits) / len(bits) if bits else None


def bit_run(window: Sequence[Snapshot], index: int, reason: str) -> int:
    """The longest run of consecutive ticks with a clock-event bit set."""
    best = run = 0
    for b in column(window, _bits, index):
        on = b is not None and reason in b
        run = run + 1 if on else 0
        best = max(best, run)
    return best


def linear_fit(points: Sequence[Point]) -> tuple[float, float] | None:
    """Least-squares slope (per second) and R² of `points`; None with fewer than 3 points or no
    spread in time."""
    return least_squares([t for t, _ in points], [v for _, v in points])


def least_squares(ts: Sequence[float], vs: Sequence[float]) -> tuple[float, float] | None:
    """`linear_fit` of the points (ts[i], vs[i])."""
    n = len(ts)
    if n < 3:
        return None
    mt = sum(ts) / n
    mv = sum(vs) / n
    dt = [t - mt for t in ts]
    dv = [v - mv for v in vs]
    two = itertools.repeat(2)
    stt = sum(map(pow, dt, two))
    svv = sum(map(pow, dv, two))
    stv = sum(map(operator.mul, dt, dv))
    if stt == 0:
        return None
    slope = stv / stt
    r2 = 1.0 if svv == 0 else stv * stv / (stt * svv)
    return slope, r2


# -- processes -----------------------------------------------------------------------------


# Modules that run another script or module (`python -m gputop.probe train.py`): the process is
# called by what they run.
RUNNERS = frozenset({"gputop.probe", "torch.distributed.run", "torch.distributed.launch",
                     "cProfile", "profile", "pdb", "trace", "debugpy", "memray", "scalene",
                     "py_spy", "viztracer", "coverage"})


def command(p: ProcessSample) -> str:
    """What the user calls the process: the script or module it runs, else its name."""
    args = p.cmdline if not isinstance(p.cmdline, Missing) else ()
    runner = None
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            if args[i + 1] not in RUNNERS:
                return args[i + 1]
            runner = runner or args[i + 1]
        elif a.endswith(".py"):
            return os.path.basename(a)
    if runner is not None:
        return runner
    if not isinstance(p.name, Missing) and p.name:
        return p.name
    return os.path.basename(args[0]) if args else "?"


def gib(n: float) -> float:
    return n / (1 << 30)
