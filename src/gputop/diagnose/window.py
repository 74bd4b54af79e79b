"""Small pure helpers that read series out of a window of Snapshots, for the rules."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Sequence

from gputop.model import DeviceSample, Missing, ProcessSample, Snapshot

Point = tuple[float, float]  # (epoch s, value)


def span(window: Sequence[Snapshot]) -> float:
    return window[-1].time - window[0].time if len(window) > 1 else 0.0


def last(window: Sequence[Snapshot], seconds: float) -> Sequence[Snapshot]:
    """The tail of `window` no older than `seconds` before its newest tick."""
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


def series(window: Sequence[Snapshot], index: int, name: str) -> list[Point]:
    """(time, value) of one device field, skipping ticks where it is missing."""
    out = []
    for s in window:  # the rules' inner loop: `device_at` and `number` inlined
        devs = s.devices
        d = devs[index] if index < len(devs) and devs[index].index == index else s.device(index)
        if d is None or d.lost is not None:
            continue
        v = getattr(d, name)
        t = type(v)
        if (t is float and math.isfinite(v)) or t is int:
            out.append((s.time, float(v)))
    return out


def busy_series(window: Sequence[Snapshot], index: int) -> tuple[str, list[Point]]:
    """GPM `gr_active` where the GPU has it, else NVML utilization (notes R1: NVML util counts
    copies as busy, gr_active is time-based kernel activity)."""
    gr = series(window, index, "gr_active")
    if gr and len(gr) * 2 >= len(window):
        return "gr_active", gr
    return "util_gpu", series(window, index, "util_gpu")


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
    total = 0.0
    for (_, a), (_, b) in itertools.pairwise(points):
        total += b - a if b >= a else b
    return total


def throttle_series(window: Sequence[Snapshot], index: int, reason: str) -> list[Point]:
    """Cumulative seconds of one clock-event reason, where the device counts them."""
    out = []
    for s in window:
        d = device_at(s, index)
        tt = d.throttle_time if d is not None else None
        if tt is not None and not isinstance(tt, Missing) and reason in tt:
            v = number(tt[reason])
            if v is not None:
                out.append((s.time, v))
    return out


def counter_growth(window: Sequence[Snapshot], index: int,
                   reason: str) -> tuple[float, float] | None:
    """(seconds a clock-event counter grew, seconds of window it covers), from its oldest and
    newest readings; a drop between them is a reset (driver reload), counted from zero."""
    ends = []
    for ticks in (window, reversed(window)):
        for s in ticks:
            d = device_at(s, index)
            tt = d.throttle_time if d is not None else None
            if tt is not None and not isinstance(tt, Missing) and reason in tt:
                v = number(tt[reason])
                if v is not None:
                    ends.append((s.time, v))
                    break
    if len(ends) < 2 or ends[1][0] <= ends[0][0]:
        return None
    (t0, a), (t1, b) = ends
    return (b - a if b >= a else b), t1 - t0


def reason_share(window: Sequence[Snapshot], index: int, reason: str) -> float | None:
    """Share of the window's time a clock-event reason held the clock: from the cumulative
    counter where there is one (precise), else from the share of ticks with the bit set."""
    grown = counter_growth(window, index, reason)
    if grown is not None:
        return min(1.0, grown[0] / grown[1])
    bits = [reason in d.throttle for s in window
            if (d := device_at(s, index)) is not None and not isinstance(d.throttle, Missing)]
    return sum(bits) / len(bits) if bits else None


def bit_run(window: Sequence[Snapshot], index: int, reason: str) -> int:
    """The longest run of consecutive ticks with a clock-event bit set."""
    best = run = 0
    for s in window:
        d = device_at(s, index)
        on = d is not None and not isinstance(d.throttle, Missing) and reason in d.throttle
        run = run + 1 if on else 0
        best = max(best, run)
    return best


def linear_fit(points: Sequence[Point]) -> tuple[float, float] | None:
    """Least-squares slope (per second) and R² of `points`; None with fewer than 3 points or no
    spread in time."""
    n = len(points)
    if n < 3:
        return None
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    stt = sum((t - mt) ** 2 for t, _ in points)
    svv = sum((v - mv) ** 2 for _, v in points)
    stv = sum((t - mt) * (v - mv) for t, v in points)
    if stt == 0:
        return None
    slope = stv / stt
    r2 = 1.0 if svv == 0 else stv * stv / (stt * svv)
    return slope, r2


# -- processes -----------------------------------------------------------------------------


def command(p: ProcessSample) -> str:
    """What the user calls the process: the script or module it runs, else its name."""
    args = p.cmdline if not isinstance(p.cmdline, Missing) else ()
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            return args[i + 1]
        if a.endswith(".py"):
            return os.path.basename(a)
    if not isinstance(p.name, Missing) and p.name:
        return p.name
    return os.path.basename(args[0]) if args else "?"


def gib(n: float) -> float:
    return n / (1 << 30)
