"""`gputop report FILE`: what went wrong during a recorded run, and a summary per GPU.

Runs every diagnostic over the recording and prints the findings' timeline (start, end, severity,
GPU, id, title) and, per GPU, utilization, memory, power and temperature (p50/p95/max), the time
its clocks were held per clock-event reason (from the cumulative counters) and the time it was
starved for input. `--json` prints the same as one object; `--html FILE` writes it as one page
with charts. Times are UTC.

The recording is read a tick at a time and each tick is dropped once the diagnostics and the
summary have taken what they need, so a day-long recording fits in memory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from gputop.diagnose import default_engine
from gputop.diagnose.engine import Finding
from gputop.diagnose.window import number, percentile
from gputop.errors import GputopError
from gputop.model import THROTTLE, DeviceSample, Missing, Snapshot
from gputop.recording import SeriesReader
from gputop.safetext import printable

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop report",
        description="Diagnose a recording: the findings' timeline and a summary per GPU.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="a recording written by gputop --record (its later segments, FILE.1 "
                        "..., are read too), or the segments to read")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--html", metavar="OUT", help="write the report as one HTML page with charts "
                                                 "(no network needed to view it)")
    return p


def main(argv: list[str]) -> int:
    """`argv` is what follows `gputop report` on the command line."""
    out, err = sys.stdout, sys.stderr
    args = build_parser().parse_args(argv)
    try:
        path = args.files[0]
        reader = SeriesReader(args.files if len(args.files) > 1 else path)
        engine = default_engine()
        recap = Recap()
        for snap in reader:
            engine.update(snap)
            recap.add(snap)
        findings = engine.timeline()
        devices = recap.summary(findings)
        if args.html:
            from gputop.diagnose.report_html import write_html

            write_html(args.html, path, reader.header, recap, findings, devices,
                       warning=reader.warning)
    except GputopError as e:
        print(f"gputop: {e}", file=err)
        return 1
    if reader.warning:
        print(f"gputop: warning: {reader.warning}", file=err)
    if args.json:
        doc = {"file": path, "ticks": recap.ticks, "start": recap.start, "end": recap.end,
               "warning": reader.warning,
               "findings": [f.to_dict() for f in findings], "devices": devices}
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
    elif args.html:
        out.write(f"wrote {printable(args.html)}: {len(findings)} findings, "
                  f"{len(devices)} GPUs, {recap.ticks} ticks\n")
    else:
        out.write(render(path, reader.header, recap, findings, devices))
    return 0


# -- per-GPU summary -------------------------------------------------------------------------


class DeviceSeries:
    """One GPU over the run: the times it was there and, at each, the METRICS (NaN where the
    field had no value); packed arrays, so a day of ticks costs a few megabytes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.times = array("d")
        self.metrics = {key: array("d") for key, *_ in METRICS}
        self.throttled = dict.fromkeys(THROTTLE, 0.0)  # counter growth so far
        self._last: dict[str, float] = {}  # each counter's previous reading

    def add(self, t: float, d: DeviceSample) -> None:
        self.times.append(t)
        for key, field, *_ in METRICS:
            v = number(getattr(d, field))
            self.metrics[key].append(_NAN if v is None else v)
        tt = d.throttle_time
        if isinstance(tt, Missing):
            return
        for reason, raw in tt.items():
            v = number(raw)
            if v is None or reason not in self.throttled:
                continue
            a = self._last.get(reason)
            if a is not None:  # a drop is a reset (driver reload), not a negative
                self.throttled[reason] += v - a if v >= a else v
            self._last[reason] = v

    def values(self, key: str) -> list[float]:
        return [v for v in self.metrics[key] if not math.isnan(v)]


class Recap:
    """What the report keeps of the run while the ticks stream past."""

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

    def summary(self, findings: Sequence[Finding]) -> list[dict[str, Any]]:
        end = self.end if self.end is not None else 0.0
        out = []
        for index in sorted(self.devices):
            dev = self.devices[index]
            row: dict[str, Any] = {"index": index, "name": dev.name}
            for key, *_ in METRICS:
                vals = dev.values(key)
                row[key] = ({"p50": percentile(vals, 50), "p95": percentile(vals, 95),
                             "max": max(vals)} if vals else None)
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


# -- text ------------------------------------------------------------------------------------


def headline(header: dict[str, Any], recap: Recap, n_devices: int) -> list[str]:
    """Host, GPUs, ticks, span (UTC) and whether the run is synthetic, as plain text."""
    if recap.start is None or recap.end is None:
        return []
    t0, t1 = recap.start, recap.end
    meta = header.get("meta")
    synthetic = isinstance(meta, dict) and bool(meta.get("synthetic"))
    what = [printable(recap.host) if recap.host else "", f"{n_devices} GPUs",
            f"{recap.ticks} ticks",
            f"{_clock(t0, '%Y-%m-%d %H:%M:%S')} to {_clock(t1, _clock_format(t0, t1))} UTC "
            f"({_duration(t1 - t0)})"]
    if synthetic:
        what.append("synthetic")
    return [w for w in what if w]


def render(path: str, header: dict[str, Any], recap: Recap,
           findings: Sequence[Finding], devices: Sequence[dict[str, Any]]) -> str:
    lines = [f"gputop report: {printable(path)}"]
    if recap.start is None or recap.end is None:
        lines.append("The recording holds no ticks.")
        return "\n".join(lines) + "\n"
    fmt = _clock_format(recap.start, recap.end)
    lines += [" · ".join(headline(header, recap, len(devices))), ""]

    lines.append(f"FINDINGS ({len(findings)})" if findings else "FINDINGS: none")
    if findings:
        rows = [["START", "END", "SEVERITY", "GPU", "ID", "TITLE"]]
        for f in findings:
            rows.append([_clock(f.since, fmt),
                         "(open)" if f.until is None else _clock(f.until, fmt),
                         f.severity.upper(), "-" if f.device is None else str(f.device),
                         printable(f.id), printable(f.title)])
        lines += _table(rows)
    lines.append("")

    rows = [["GPU", "NAME", *(f"{m[2]} p50/p95/max" for m in METRICS), "THROTTLED", "STARVED"]]
    for d in devices:
        row = [str(d["index"]), printable(d["name"])]
        for key, _, _, scale, dec in METRICS:
            st = d[key]
            row.append("-" if st is None else "/".join(
                f"{st[q] * scale:.{dec}f}" for q in ("p50", "p95", "max")))
        row.append(", ".join(f"{r} {_duration(s)}" for r, s in d["throttled_s"].items()) or "-")
        row.append(_duration(d["starved_s"]) if d["starved_s"] else "-")
        rows.append(row)
    lines += _table(rows)
    return "\n".join(lines) + "\n"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _clock_format(t0: float, t1: float) -> str:
    same_day = time.gmtime(t0)[:3] == time.gmtime(t1)[:3]
    return "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"


def _clock(t: float, fmt: str) -> str:
    return time.strftime(fmt, time.gmtime(t))


def _duration(s: float) -> str:
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


__all__ = ["Recap", "build_parser", "headline", "main", "render", "summarize"]
