"""`gputop report FILE --html OUT`: the report as one self-contained HTML page.

Inline CSS and inline SVG drawn here: no script, no font or stylesheet from the network, so the
page opens in any browser, offline, years later. Every string that came from the machine (host,
GPU and process names, titles that quote them, the file name) goes through `_text`: control
characters are shown as escapes and markup is escaped. Severity is written as a word next to
its colour.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gputop.diagnose.types import SEVERITIES, Finding
from gputop.report.output import replacing
from gputop.report.recap import CHART_BUCKETS, METRICS, DeviceSeries, Recap
from gputop.report.text import clock, clock_format, duration, headline
from gputop.safetext import printable

MAX_POINTS = 2 * CHART_BUCKETS  # per chart line: more than a chart this wide can show
CHART_W, CHART_H = 300, 110
PAD_L, PAD_R, PAD_T, PAD_B = 44, 8, 8, 20
SEVERITY_COLOUR = {"critical": "#c62828", "warning": "#ef8c00", "info": "#1e88e5"}
# (summary key, chart title, unit scale, fixed top of the axis or None)
CHARTS = (
    ("util_pct", "Utilization %", 1.0, 100.0),
    ("mem_used_bytes", "Memory used GiB", 1.0 / (1 << 30), None),
    ("power_w", "Power W", 1.0, None),
    ("temp_c", "Temperature °C", 1.0, None),
)

CSS = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px;
       color: #1d232b; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #d6dbe1; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #4a5561; }
.banner { background: #fff4e0; border: 1px solid #ef8c00; padding: 6px 10px; margin: 8px 0; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e4e8ec;
         vertical-align: top; }
th { background: #f3f5f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.when { white-space: nowrap; font-variant-numeric: tabular-nums; }
details { color: #4a5561; font-size: 13px; max-width: 760px; }
summary { cursor: pointer; }
.sev { font-weight: 600; white-space: nowrap; }
.sev.critical { color: #c62828; } .sev.warning { color: #b26200; } .sev.info { color: #1565c0; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { border: 1px solid #e4e8ec; padding: 4px; }
.chart .title { font-size: 12px; color: #4a5561; margin: 0 0 2px 4px; }
svg text { font: 10px system-ui, sans-serif; fill: #4a5561; }
svg .axis { stroke: #c3cad2; stroke-width: 1; }
svg .grid { stroke: #eef1f4; stroke-width: 1; }
svg .line { fill: none; stroke: #2e5c8a; stroke-width: 1.2; }
svg .lane text { font-size: 11px; fill: #1d232b; }
.none { color: #4a5561; }
footer { margin-top: 32px; color: #8a949e; font-size: 12px; }
"""


def write_html(out: str, path: str, header: dict[str, Any], recap: Recap,
               findings: Sequence[Finding], devices: Sequence[dict[str, Any]],
               warning: str | None = None) -> None:
    page = render_html(path, header, recap, findings, devices, warning=warning)
    with replacing(out) as part:  # never through a link planted at `out`
        Path(part).write_text(page, encoding="utf-8")


def render_html(path: str, header: dict[str, Any], recap: Recap,
                findings: Sequence[Finding], devices: Sequence[dict[str, Any]],
                warning: str | None = None) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>gputop report: {_text(Path(path).name)}</title>",
             f"<style>{CSS}</style></head><body>",
             "<h1>gputop report</h1>", f'<div class="meta">{_text(path)}</div>']
    warned = [f'<div class="banner">Warning: {_text(warning)}</div>'] if warning else []
    if recap.start is None or recap.end is None:
        parts += [*warned, "<p>The recording holds no ticks.</p>"]
        return "\n".join([*parts, "</body></html>", ""])
    parts.append(f'<div class="meta">{_text(" · ".join(headline(header, recap, len(devices))))}'
                 "</div>")
    parts += warned
    t0, t1 = recap.start, recap.end
    parts.append(f"<h2>Findings ({len(findings)})</h2>" if findings else "<h2>Findings</h2>")
    if findings:
        parts.append(_timeline(findings, t0, t1))
    else:
        parts.append('<p class="none">No findings: no diagnostic saw a problem.</p>')
    parts.append("<h2>Summary per GPU</h2>")
    parts.append(_summary(devices))
    parts.append("<h2>GPUs over time</h2>")
    parts.append('<p class="meta">A shaded band is a stretch with a finding on that GPU or the '
                 "whole node (point at it for its severity); the findings are listed below.</p>")
    for index in sorted(recap.devices):
        dev = recap.devices[index]
        mine = [f for f in findings if f.device in (index, None)]
        parts.append(f"<h3>GPU {index} · {_text(dev.name)}</h3>")
        parts.append('<div class="charts">')
        for key, title, scale, top in CHARTS:
            parts.append(_chart(dev, key, title, scale, top, t0, t1, mine))
        parts.append("</div>")
    if findings:
        parts.append("<h2>Findings in detail</h2>")
        parts.append(_findings_table(findings, t0, t1))
    parts.append(f"<footer>Times are UTC. Made by gputop from {recap.ticks} ticks.</footer>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _text(s: object) -> str:
    """Untrusted text as HTML text: control characters shown as escapes, markup escaped."""
    return html.escape(printable(str(s)), quote=True)


# -- findings ----------------------------------------------------------------------------------


def _findings_table(findings: Sequence[Finding], t0: float, t1: float) -> str:
    fmt = clock_format(t0, t1)
    rows = ["<table><tr><th>Began</th><th>Shown</th><th>End</th><th>Severity</th><th>GPU</th>"
            "<th>ID</th><th>What</th></tr>"]
    for f in findings:
        end = "open" if f.until is None else clock(f.until, fmt)
        shown = "-" if f.opened is None else clock(f.opened, fmt)
        detail = " ".join(x for x in (f.cause, f"Fix: {f.fix}" if f.fix else "") if x)
        rows.append(
            f'<tr><td class="when">{clock(f.since, fmt)}</td><td class="when">{shown}</td>'
            f'<td class="when">{end}</td>'
            f'<td><span class="sev {_sev(f)}">{_sev(f).upper()}</span></td>'
            f'<td class="num">{"-" if f.device is None else f.device}</td>'
            f"<td>{_text(f.id)}</td><td>{_text(f.title)}"
            f"<details><summary>why, and what to do</summary>{_text(detail)}</details></td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _timeline(findings: Sequence[Finding], t0: float, t1: float) -> str:
    """One lane per kind of finding on a GPU (a day can hold hundreds of findings of a few
    kinds), over the run's time axis, labelled with its worst severity, GPU and id."""
    lanes: dict[tuple[str, int | None], list[Finding]] = {}
    for f in sorted(findings, key=lambda f: f.since):
        lanes.setdefault((f.id, f.device), []).append(f)
    lane, label_w, width = 18, 300, 1100
    plot_w = width - label_w - PAD_R
    height = PAD_T + lane * len(lanes) + PAD_B
    x = _scale(t0, t1, label_w, label_w + plot_w)
    out = [f'<svg role="img" aria-label="Findings timeline" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    out += _time_axis(t0, t1, x, PAD_T, height - PAD_B)
    for i, ((fid, device), group) in enumerate(lanes.items()):
        y = PAD_T + i * lane
        worst = max(group, key=lambda f: SEVERITIES.index(_sev(f)))
        gpu = "node" if device is None else f"GPU{device}"
        times = f" ({len(group)} times)" if len(group) > 1 else ""
        label = f"{_sev(worst).upper()} {gpu} {fid}{times}"
        out.append(f'<g class="lane"><text x="4" y="{y + lane - 5}">{_text(_clip(label, 46))}'
                   "</text>")
        for f in group:
            a, b = x(f.since), x(f.until if f.until is not None else t1)
            out.append(f'<rect x="{a:.1f}" y="{y + 3}" width="{max(b - a, 2):.1f}" '
                       f'height="{lane - 6}" fill="{SEVERITY_COLOUR[_sev(f)]}" rx="2">'
                       f"<title>{_sev(f).upper()}: {_text(f.title)}</title></rect>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _sev(f: Finding) -> str:
    return f.severity if f.severity in SEVERITY_COLOUR else "info"


# -- charts ------------------------------------------------------------------------------------


def _chart(dev: DeviceSeries, key: str, title: str, scale: float, top: float | None,
           t0: float, t1: float, findings: Sequence[Finding]) -> str:
    ts, vs = dev.traces[key].points()
    present = [v * scale for v in vs if not math.isnan(v)]
    w, h = CHART_W, CHART_H
    x = _scale(t0, t1, PAD_L, w - PAD_R)
    if present:
        lo = min(0.0, min(present))
        hi = top if top is not None and max(present) <= top else max(present)
        hi = hi if hi > lo else lo + 1.0
    else:
        lo, hi = 0.0, top or 1.0
    y = _scale(lo, hi, h - PAD_B, PAD_T)
    out = [f'<div class="chart"><div class="title">{_text(title)}</div>'
           f'<svg role="img" aria-label="{_text(title)}" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">']
    for sev, a, b, n in _bands(findings, t1):  # under the line
        out.append(f'<rect x="{x(a):.1f}" y="{PAD_T}" width="{max(x(b) - x(a), 1.5):.1f}" '
                   f'height="{h - PAD_T - PAD_B}" fill="{SEVERITY_COLOUR[sev]}" '
                   f'fill-opacity="0.13"><title>{sev.upper()}: {n} finding'
                   f'{"s" if n > 1 else ""}</title></rect>')
    for v in (lo, (lo + hi) / 2, hi):
        yy = y(v)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{w - PAD_R}" y1="{yy:.1f}" '
                   f'y2="{yy:.1f}"/><text x="{PAD_L - 4}" y="{yy + 3:.1f}" '
                   f'text-anchor="end">{_number(v)}</text>')
    out += _time_axis(t0, t1, x, PAD_T, h - PAD_B, ticks=3)
    if present:
        out.append(f'<path class="line" d="{_path(ts, vs, x, y, scale)}"/>')
    else:
        out.append(f'<text x="{w / 2}" y="{h / 2}" text-anchor="middle">not measured</text>')
    out.append("</svg></div>")
    return "".join(out)


def _bands(findings: Sequence[Finding], end: float) -> list[tuple[str, float, float, int]]:
    """(severity, start, end, findings) of the time covered by findings of each severity, with
    overlapping findings merged: one band however many rules saw the same stretch."""
    out: list[tuple[str, float, float, int]] = []
    for sev in SEVERITIES:
        spans = sorted((f.since, f.until if f.until is not None else end)
                       for f in findings if _sev(f) == sev)
        for a, b in spans:
            if out and out[-1][0] == sev and a <= out[-1][2]:
                _, a0, b0, n = out[-1]
                out[-1] = (sev, a0, max(b, b0), n + 1)
            else:
                out.append((sev, a, b, 1))
    return out


def _path(ts: Sequence[float], vs: Sequence[float], x: Any, y: Any, scale: float) -> str:
    """An SVG path through the points, lifting the pen over ticks without a value."""
    d: list[str] = []
    pen_up = True
    for t, v in zip(ts, vs):
        if math.isnan(v):
            pen_up = True
            continue
        d.append(f"{'M' if pen_up else 'L'}{x(t):.1f},{y(v * scale):.1f}")
        pen_up = False
    return " ".join(d)


def _time_axis(t0: float, t1: float, x: Any, top: float, bottom: float,
               ticks: int = 6) -> list[str]:
    fmt = "%H:%M" if t1 - t0 >= 600 else "%H:%M:%S"
    if time.gmtime(t0)[:3] != time.gmtime(t1)[:3] and ticks > 3:
        fmt = "%m-%d %H:%M"
    out = [f'<line class="axis" x1="{x(t0):.1f}" x2="{x(t1):.1f}" y1="{bottom}" '
           f'y2="{bottom}"/>']
    for k in range(ticks + 1):
        t = t0 + (t1 - t0) * k / ticks
        xx = x(t)
        anchor = "start" if k == 0 else "end" if k == ticks else "middle"
        out.append(f'<line class="grid" x1="{xx:.1f}" x2="{xx:.1f}" y1="{top}" y2="{bottom}"/>'
                   f'<text x="{xx:.1f}" y="{bottom + 13}" text-anchor="{anchor}">'
                   f"{time.strftime(fmt, time.gmtime(t))}</text>")
    return out


def _scale(d0: float, d1: float, r0: float, r1: float) -> Any:
    span = d1 - d0 if d1 != d0 else 1.0
    return lambda v: r0 + (v - d0) / span * (r1 - r0)


def _number(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 10 or v == 0 else f"{v:.1f}"


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# -- summary -----------------------------------------------------------------------------------


def _summary(devices: Sequence[dict[str, Any]]) -> str:
    head = "".join(f"<th>{_text(m[2])} p50 / p95 / max</th>" for m in METRICS)
    rows = [f"<table><tr><th>GPU</th><th>Name</th>{head}<th>Clocks held</th>"
            "<th>Starved</th></tr>"]
    for d in devices:
        cells = [f'<td class="num">{d["index"]}</td>', f"<td>{_text(d['name'])}</td>"]
        for key, _, _, scale, dec in METRICS:
            st = d[key]
            cells.append('<td class="num">' + ("-" if st is None else " / ".join(
                f"{st[q] * scale:.{dec}f}" for q in ("p50", "p95", "max"))) + "</td>")
        held = ", ".join(f"{r} {duration(s)}" for r, s in d["throttled_s"].items()) or "-"
        cells.append(f"<td>{_text(held)}</td>")
        cells.append(f'<td class="num">{duration(d["starved_s"]) if d["starved_s"] else "-"}'
                     "</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    rows.append("</table>")
    return "\n".join(rows)


__all__ = ["MAX_POINTS", "render_html", "write_html"]
