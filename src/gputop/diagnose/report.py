"""`gputop report FILE`: what went wrong during a recorded run, and a summary per GPU.

Runs every diagnostic over the recording and prints the findings' timeline (start, end, severity,
GPU, id, title) and, per GPU, utilization, memory, power and temperature (p50/p95/max), the time
its clocks were held per clock-event reason (from the cumulative counters) and the time it was
starved for input. `--json` prints the same as one object. Times are UTC.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from gputop.diagnose import default_engine
from gputop.diagnose.engine import Finding
from gputop.diagnose.window import increase, number, percentile, throttle_series
from gputop.errors import RecordingError
from gputop.model import THROTTLE, Snapshot
from gputop.recording import read_recording
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop report",
        description="Diagnose a recording: the findings' timeline and a summary per GPU.")
    p.add_argument("file", metavar="FILE", help="a recording written by gputop --record")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def main(argv: list[str]) -> int:
    """`argv` is what follows `gputop report` on the command line."""
    out, err = sys.stdout, sys.stderr
    args = build_parser().parse_args(argv)
    try:
        rec = read_recording(args.file)
    except RecordingError as e:
        print(f"gputop: {e}", file=err)
        return 1
    if rec.warning:
        print(f"gputop: warning: {rec.warning}", file=err)
    snaps = rec.snapshots
    findings = default_engine().run(snaps)
    devices = summarize(snaps, findings)
    if args.json:
        doc = {"file": args.file, "ticks": len(snaps),
               "start": snaps[0].time if snaps else None,
               "end": snaps[-1].time if snaps else None,
               "warning": rec.warning,
               "findings": [f.to_dict() for f in findings], "devices": devices}
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render(args.file, rec.header, snaps, findings, devices))
    return 0


# -- per-GPU summary -------------------------------------------------------------------------


def summarize(snaps: Sequence[Snapshot], findings: Sequence[Finding]) -> list[dict[str, Any]]:
    names: dict[int, str] = {}
    for s in snaps:
        for d in s.devices:
            names[d.index] = d.name
    end = snaps[-1].time if snaps else 0.0
    return [_device_summary(snaps, i, names[i], findings, end) for i in sorted(names)]


def _device_summary(snaps: Sequence[Snapshot], index: int, name: str,
                    findings: Sequence[Finding], end: float) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "name": name}
    for key, field, _, _, _ in METRICS:
        vals = [v for s in snaps if (d := s.device(index)) is not None and d.lost is None
                and (v := number(getattr(d, field))) is not None]
        out[key] = ({"p50": percentile(vals, 50), "p95": percentile(vals, 95), "max": max(vals)}
                    if vals else None)
    throttled = {}
    for reason in THROTTLE:
        grown = increase(throttle_series(snaps, index, reason))
        if grown > 0:
            throttled[reason] = grown
    out["throttled_s"] = throttled
    out["starved_s"] = _covered([(f.since, f.until if f.until is not None else end)
                                 for f in findings if f.id == STARVED_ID and f.device == index])
    return out


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


def render(path: str, header: dict[str, Any], snaps: Sequence[Snapshot],
           findings: Sequence[Finding], devices: Sequence[dict[str, Any]]) -> str:
    lines = [f"gputop report: {printable(path)}"]
    if not snaps:
        lines.append("The recording holds no ticks.")
        return "\n".join(lines) + "\n"
    t0, t1 = snaps[0].time, snaps[-1].time
    fmt = _clock_format(t0, t1)
    host = snaps[-1].system.hostname or snaps[-1].host.hostname
    meta = header.get("meta")
    synthetic = isinstance(meta, dict) and bool(meta.get("synthetic"))
    what = [printable(host) if host else "", f"{len(devices)} GPUs", f"{len(snaps)} ticks",
            f"{_clock(t0, '%Y-%m-%d %H:%M:%S')} to {_clock(t1, fmt)} UTC ({_duration(t1 - t0)})"]
    if synthetic:
        what.append("synthetic")
    lines += [" · ".join(w for w in what if w), ""]

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


__all__ = ["build_parser", "main", "render", "summarize"]
