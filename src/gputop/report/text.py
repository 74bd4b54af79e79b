"""`gputop report` as text: the findings' timeline and a line per GPU; times in UTC."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gputop.diagnose.types import Finding
from gputop.report.recap import METRICS, Recap
from gputop.safetext import printable


def headline(header: dict[str, Any], recap: Recap, n_devices: int) -> list[str]:
    """Host, GPUs, ticks, span (UTC) and whether the run is synthetic, as plain text."""
    if recap.start is None or recap.end is None:
        return []
    t0, t1 = recap.start, recap.end
    meta = header.get("meta")
    synthetic = isinstance(meta, dict) and bool(meta.get("synthetic"))
    what = [printable(recap.host) if recap.host else "", f"{n_devices} GPUs",
            f"{recap.ticks} ticks",
            f"{clock(t0, '%Y-%m-%d %H:%M:%S')} to {clock(t1, clock_format(t0, t1))} UTC "
            f"({duration(t1 - t0)})"]
    if synthetic:
        what.append("synthetic")
    return [w for w in what if w]


def render(path: str, header: dict[str, Any], recap: Recap,
           findings: Sequence[Finding], devices: Sequence[dict[str, Any]]) -> str:
    lines = [f"gputop report: {printable(path)}"]
    if recap.start is None or recap.end is None:
        lines.append("The recording holds no ticks.")
        return "\n".join(lines) + "\n"
    fmt = clock_format(recap.start, recap.end)
    lines += [" · ".join(headline(header, recap, len(devices))), ""]

    lines.append(f"FINDINGS ({len(findings)})" if findings else "FINDINGS: none")
    if findings:
        # BEGAN: when the condition began to hold; SHOWN: when the finding opened, which is
        # when the dashboard showed it (BEGAN plus the rule's hold).
        rows = [["BEGAN", "SHOWN", "END", "SEVERITY", "GPU", "ID", "TITLE"]]
        for f in findings:
            rows.append([clock(f.since, fmt),
                         "-" if f.opened is None else clock(f.opened, fmt),
                         "(open)" if f.until is None else clock(f.until, fmt),
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
        row.append(", ".join(f"{r} {duration(s)}" for r, s in d["throttled_s"].items()) or "-")
        row.append(duration(d["starved_s"]) if d["starved_s"] else "-")
        rows.append(row)
    lines += _table(rows)
    return "\n".join(lines) + "\n"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def clock_format(t0: float, t1: float) -> str:
    same_day = time.gmtime(t0)[:3] == time.gmtime(t1)[:3]
    return "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"


def clock(t: float, fmt: str) -> str:
    return time.strftime(fmt, time.gmtime(t))


def duration(s: float) -> str:
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"
