"""The recap of a recorded run: per GPU, utilization, memory, power and temperature
(p50/p95/max), the time its clocks were held per clock-event reason (from the cumulative counters)
and the time it was starved for input, with the series the HTML report charts.

A Recap takes ticks one at a time and keeps only what its figures need, so a day-long recording
fits in memory; two recaps of consecutive files merge (report.summary reads them back from the
summaries at the end of each finished file)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from gputop.diagnose.types import Finding
from gputop.diagnose.window import number
from gputop.model import THROTTLE, DeviceSample, Missing, Snapshot

STARVED_ID = "loader.starvation"
GiB = 1 << 30
# (summary key, DeviceSample field, text header, scale, decimals)
METRICS = (
    ("util_pct", "util_gpu", "UTIL %", 1.0, 0),
    ("mem_used_bytes", "mem_used", "MEM GiB", 1.0 / GiB, 1),
    ("power_w", "power_draw", "POWER W", 1.0, 0),
    ("temp_c", "temp_gpu", "TEMP °C", 1.0, 0),
)
_NAN = float("nan")


# -- per-GPU summary -------------------------------------------------------------------------


class Counts:
    """How often each value was seen: exact percentiles, and two runs' counts simply add up.
    Sensors report few distinct values (whole % and °C, watts to a tenth), so this stays small."""

    def __init__(self, counts: dict[float, int] | None = None) -> None:
        self.counts: dict[float, int] = counts if counts is not None else {}

    def add(self, v: float) -> None:
        self.counts[v] = self.counts.get(v, 0) + 1

    def merge(self, other: Counts) -> None:
        for v, n in other.counts.items():
            self.counts[v] = self.counts.get(v, 0) + n

    def stats(self) -> dict[str, float] | None:
        """p50, p95 and max, as `percentile` over every value seen would give them."""
        if not self.counts:
            return None
        values = sorted(self.counts)
        total = sum(self.counts.values())
        return {"p50": self._percentile(values, total, 50),
                "p95": self._percentile(values, total, 95), "max": values[-1]}

    def _percentile(self, values: list[float], total: int, q: float) -> float:
        pos = (total - 1) * q / 100.0
        lo = math.floor(pos)
        a = b = None
        seen = 0
        for v in values:
            seen += self.counts[v]
            if a is None and seen > lo:
                a = v
            if seen > lo + 1 or seen == total:
                b = v
                break
        assert a is not None and b is not None
        return a + (b - a) * (pos - lo)

    def to_json(self) -> list[list[float]]:
        values = sorted(self.counts)
        return [values, [self.counts[v] for v in values]]

    @classmethod
    def from_json(cls, d: Any) -> Counts:
        values, ns = d
        if len(values) != len(ns):
            raise ValueError("values and counts differ in length")
        counts: dict[float, int] = {}
        for v, n in zip(values, ns):
            if not isinstance(n, int) or n <= 0:
                raise ValueError(f"a count of {n!r}")
            counts[float(v)] = counts.get(float(v), 0) + n
        return cls(counts)


class Trace:
    """One chart line: the run cut into time buckets of `width` seconds (a power of two, aligned
    to the epoch), each keeping its lowest and highest point, so a one-tick spike or dip still
    shows. When there would be more than `cap` buckets the width doubles. A bucket's content
    depends only on the ticks in it, so traces of consecutive files merge into the trace of
    the whole run, bucket for bucket."""

    def __init__(self, cap: int, width: float = 1.0) -> None:
        self.cap = cap
        self.width = width
        # bucket -> [t_lo, v_lo, t_hi, v_hi]; v is NaN in a bucket without a value (a gap),
        # whose t is its first tick
        self.buckets: dict[int, list[float]] = {}

    def add(self, t: float, v: float) -> None:
        k = math.floor(t / self.width)
        b = self.buckets.get(k)
        if b is None:
            self.buckets[k] = [t, v, t, v]
            if len(self.buckets) > self.cap:
                self._coarsen()
        else:
            _combine(b, (t, v, t, v))

    def merge(self, other: Trace) -> None:
        while self.width < other.width:
            self._coarsen(once=True)
        theirs = other.buckets
        if other.width < self.width:
            theirs = _coarser(theirs, other.width, self.width)
        for k, b in theirs.items():
            mine = self.buckets.get(k)
            if mine is None:
                self.buckets[k] = list(b)
            else:
                _combine(mine, b)
        if len(self.buckets) > self.cap:
            self._coarsen()

    def _coarsen(self, once: bool = False) -> None:
        while True:
            self.buckets = _coarser(self.buckets, self.width, self.width * 2)
            self.width *= 2
            if once or len(self.buckets) <= self.cap:
                return

    def points(self) -> tuple[list[float], list[float]]:
        """The line's points in time order; NaN where the line is lifted."""
        ts: list[float] = []
        vs: list[float] = []
        for k in sorted(self.buckets):
            t0, v0, t1, v1 = self.buckets[k]
            if math.isnan(v0):
                ts.append(t0)
                vs.append(_NAN)
                continue
            pts = sorted({(t0, v0), (t1, v1)})
            for t, v in pts:
                ts.append(t)
                vs.append(v)
        return ts, vs

    def to_json(self) -> dict[str, Any]:
        return {"width": self.width,
                "buckets": [[k, t0, None if math.isnan(v0) else v0, t1,
                             None if math.isnan(v1) else v1]
                            for k, (t0, v0, t1, v1) in self.buckets.items()]}

    @classmethod
    def from_json(cls, d: Any, cap: int) -> Trace:
        width = float(d["width"])
        if not width > 0 or math.frexp(width)[0] != 0.5:
            raise ValueError(f"a bucket width of {width!r}")
        tr = cls(cap, width)
        for k, t0, v0, t1, v1 in d["buckets"]:
            if not isinstance(k, int):
                raise TypeError("a bucket that is not a whole number")
            tr.buckets[k] = [float(t0), _NAN if v0 is None else float(v0), float(t1),
                             _NAN if v1 is None else float(v1)]
        if len(tr.buckets) > cap:
            tr._coarsen()
        return tr


def _combine(b: list[float], o: Sequence[float]) -> None:
    """Bucket `b` takes in bucket `o` of the same time span."""
    if math.isnan(o[1]):
        if math.isnan(b[1]) and o[0] < b[0]:
            b[0] = b[2] = o[0]
        return
    if math.isnan(b[1]):
        b[:] = o
        return
    if (o[1], o[0]) < (b[1], b[0]):
        b[0], b[1] = o[0], o[1]
    if (o[3], o[2]) > (b[3], b[2]):
        b[2], b[3] = o[2], o[3]


def _coarser(buckets: dict[int, list[float]], width: float,
             to: float) -> dict[int, list[float]]:
    shift = round(math.log2(to / width))
    out: dict[int, list[float]] = {}
    for k, b in buckets.items():
        mine = out.get(k >> shift)
        if mine is None:
            out[k >> shift] = list(b)
        else:
            _combine(mine, b)
    return out


class Counter:
    """A cumulative counter's growth: last - first reading, plus the reading before each drop
    (a drop is a reset, a driver reload, not a negative). Kept as those parts, not a running
    sum, so that consecutive files add up to exactly what the whole run gives."""

    __slots__ = ("first", "last", "resets")

    def __init__(self, first: float, last: float | None = None,
                 resets: list[float] | None = None) -> None:
        self.first = first
        self.last = first if last is None else last
        self.resets = resets if resets is not None else []

    def add(self, v: float) -> None:
        if v < self.last:
            self.resets.append(self.last)
        self.last = v

    def merge(self, later: Counter) -> None:
        self.add(later.first)
        self.resets += later.resets
        self.last = later.last

    @property
    def growth(self) -> float:
        return (self.last - self.first) + math.fsum(self.resets)


CHART_BUCKETS = 500  # per chart line, each drawn as at most two points


class DeviceSeries:
    """One GPU over the run: the METRICS' value counts and chart lines, and the clock-event
    counters. Its size does not grow with the run's length."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.counts = {key: Counts() for key, *_ in METRICS}
        self.traces = {key: Trace(CHART_BUCKETS) for key, *_ in METRICS}
        self.counters: dict[str, Counter] = {}  # clock-event reason -> its time counter

    def add(self, t: float, d: DeviceSample) -> None:
        for key, field, *_ in METRICS:
            v = number(getattr(d, field))
            if v is None:
                self.traces[key].add(t, _NAN)
            else:
                self.counts[key].add(v)
                self.traces[key].add(t, v)
        tt = d.throttle_time
        if isinstance(tt, Missing):
            return
        for reason, raw in tt.items():
            v = number(raw)
            if v is None or reason not in THROTTLE:
                continue
            c = self.counters.get(reason)
            if c is None:
                self.counters[reason] = Counter(v)
            else:
                c.add(v)

    @property
    def throttled(self) -> dict[str, float]:
        """Seconds the clocks were held, per clock-event reason (THROTTLE's order)."""
        return {r: self.counters[r].growth if r in self.counters else 0.0 for r in THROTTLE}

    def merge(self, later: DeviceSeries) -> None:
        """Takes in the same GPU over the ticks that came after."""
        self.name = later.name
        for key, *_ in METRICS:
            self.counts[key].merge(later.counts[key])
            self.traces[key].merge(later.traces[key])
        for reason, c in later.counters.items():
            mine = self.counters.get(reason)
            if mine is None:
                self.counters[reason] = Counter(c.first, c.last, list(c.resets))
            else:
                mine.merge(c)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name,
                "counts": {k: c.to_json() for k, c in self.counts.items()},
                "traces": {k: t.to_json() for k, t in self.traces.items()},
                "counters": {r: [c.first, c.last, c.resets] for r, c in self.counters.items()}}

    @classmethod
    def from_json(cls, d: Any) -> DeviceSeries:
        name = d["name"]
        if not isinstance(name, str):
            raise TypeError("a GPU name that is not text")
        dev = cls(name)
        for key, *_ in METRICS:
            dev.counts[key] = Counts.from_json(d["counts"][key])
            dev.traces[key] = Trace.from_json(d["traces"][key], CHART_BUCKETS)
        for reason, (first, last, resets) in d["counters"].items():
            dev.counters[str(reason)] = Counter(float(first), float(last),
                                                [float(x) for x in resets])
        return dev


class Recap:
    """What the report keeps of the run while the ticks stream past. The recaps of consecutive
    stretches of a run merge into the recap of the whole (`merge`), and a recap is saved as
    JSON (`to_json`): the recorder keeps one for each file it writes."""

    def __init__(self) -> None:
        self.ticks = 0
        self.start: float | None = None
        self.end: float | None = None
        self.host = ""
        self.devices: dict[int, DeviceSeries] = {}

    def add(self, s: Snapshot) -> None:
        self.ticks += 1
        if self.start is None:
            self.start = s.time
        self.end = s.time
        self.host = s.system.hostname or s.host.hostname
        seen = set()
        for d in s.devices:
            dev = self.devices.get(d.index)
            if dev is None:
                dev = self.devices[d.index] = DeviceSeries(d.name)
            dev.name = d.name
            if d.index in seen:
                continue  # the first entry of an index is the device
            seen.add(d.index)
            if d.lost is None:  # a lost GPU says nothing
                dev.add(s.time, d)

    def merge(self, later: Recap) -> None:
        """Takes in the recap of the ticks that came after this one's."""
        if later.ticks == 0:
            return
        self.ticks += later.ticks
        if self.start is None:
            self.start = later.start
        self.end = later.end
        self.host = later.host
        for index, dev in later.devices.items():
            mine = self.devices.get(index)
            if mine is None:
                self.devices[index] = mine = DeviceSeries(dev.name)
            mine.merge(dev)

    def to_json(self) -> dict[str, Any]:
        return {"ticks": self.ticks, "start": self.start, "end": self.end, "host": self.host,
                "devices": {str(i): d.to_json() for i, d in self.devices.items()}}

    @classmethod
    def from_json(cls, d: Any) -> Recap:
        r = cls()
        ticks, start, end, host = d["ticks"], d["start"], d["end"], d["host"]
        if not isinstance(ticks, int) or ticks < 0 or not isinstance(host, str):
            raise TypeError("a recap whose tick count or host is of the wrong kind")
        if ticks and not all(isinstance(t, (int, float)) for t in (start, end)):
            raise TypeError("a recap without its start and end")
        r.ticks, r.host = ticks, host
        r.start, r.end = (float(start), float(end)) if ticks else (None, None)
        for i, dev in d["devices"].items():
            r.devices[int(i)] = DeviceSeries.from_json(dev)
        return r

    def summary(self, findings: Sequence[Finding]) -> list[dict[str, Any]]:
        end = self.end if self.end is not None else 0.0
        out = []
        for index in sorted(self.devices):
            dev = self.devices[index]
            row: dict[str, Any] = {"index": index, "name": dev.name}
            for key, *_ in METRICS:
                row[key] = dev.counts[key].stats()
            row["throttled_s"] = {r: s for r, s in dev.throttled.items() if s > 0}
            row["starved_s"] = _covered([(f.since, f.until if f.until is not None else end)
                                         for f in findings
                                         if f.id == STARVED_ID and f.device == index])
            out.append(row)
        return out


def summarize(snaps: Iterable[Snapshot], findings: Sequence[Finding]) -> list[dict[str, Any]]:
    recap = Recap()
    for s in snaps:
        recap.add(s)
    return recap.summary(findings)


def _covered(spans: list[tuple[float, float]]) -> float:
    """Total time under the union of the spans."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


__all__ = ["Recap", "summarize"]
