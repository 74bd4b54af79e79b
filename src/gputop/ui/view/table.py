"""One-shot plain-text output (`gputop --once`): a table a person reads, for shells and pipes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gputop.model import DeviceSample, Missing, ProcessSample, Snapshot
from gputop.safetext import command_line, printable

GIB = 1 << 30
JOB_WIDTH = 40  # a pod's name can be 253 characters; the table keeps its start

# Reasons worth naming in a table. gpu_idle is not throttling; power capping is normal under load.
THROTTLE_LABELS = {
    "sw_power_cap": "PWR CAP",
    "hw_slowdown": "HW SLOW",
    "sw_thermal": "THERMAL",
    "hw_thermal": "HW THERM",
    "hw_power_brake": "PWR BRAKE",
    "sync_boost": "SYNC",
    "board_limit": "BOARD",
    "current_limit": "CURRENT",
    "prochot": "PROCHOT",
}


def fmt(v: Any, f: Callable[[Any], str] = str) -> str:
    return v.label() if isinstance(v, Missing) else f(v)


def gib(v: Any) -> str:
    return fmt(v, lambda b: f"{b / GIB:.1f}")


def pct(v: Any) -> str:
    return fmt(v, lambda p: f"{p:.0f}%")


def throttle_label(d: DeviceSample) -> str:
    if isinstance(d.throttle, Missing):
        return d.throttle.label()
    names = [THROTTLE_LABELS[r] for r in d.throttle if r in THROTTLE_LABELS]
    return ",".join(names) if names else "-"


def device_row(d: DeviceSample) -> list[str]:
    if d.lost is not None:
        return [str(d.index), printable(d.name), "LOST", "", "", "", "", "", "fell off the bus"]
    mem = (f"{gib(d.mem_used)}/{gib(d.mem_total)} GiB"
           if not isinstance(d.mem_total, Missing) else d.mem_total.label())
    temp = fmt(d.temp_gpu, lambda t: f"{t:.0f}°C")
    clock = fmt(d.clock_sm, lambda c: f"{c} MHz")
    return [str(d.index), printable(d.name), pct(d.util_gpu), pct(d.sm_active), mem, temp,
            power_cell(d), clock, throttle_label(d)]


def power_cell(d: DeviceSample) -> str:
    """"636/700 W"; a reading without a known limit is "636 W", not "636/n/s W"."""
    draw, limit = d.power_draw, d.power_limit
    if isinstance(draw, Missing):
        return draw.label() if isinstance(limit, Missing) else f"{draw.label()} (cap {limit:.0f} W)"
    if isinstance(limit, Missing):
        return f"{draw:.0f} W"
    return f"{draw:.0f}/{limit:.0f} W"


def process_row(p: ProcessSample, now: float) -> list[str]:
    user = fmt(p.user, printable)
    job = _clip(printable(p.job.label()), JOB_WIDTH) if p.job else ""
    cmd = command_line(p.cmdline) if isinstance(p.cmdline, tuple) and p.cmdline else ""
    if not cmd:
        cmd = fmt(p.name, printable)
    return [str(p.device_index), str(p.pid), user, job, gib(p.gpu_mem) + " GiB",
            pct(p.sm_util), fmt(p.cpu_percent, lambda c: f"{c:.0f}%"),
            str(len(p.children)) if p.children else "", cmd]


def render(snap: Snapshot, *, width: int = 120) -> str:
    sysinfo = snap.system
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap.time))
    head = [printable(sysinfo.hostname or snap.host.hostname or "?"),
            f"driver {fmt(sysinfo.driver_version)}"]
    if not isinstance(sysinfo.cuda_version, Missing):
        head.append(f"CUDA {sysinfo.cuda_version}")
    if not isinstance(sysinfo.rocm_version, Missing):
        head.append(f"ROCm {sysinfo.rocm_version}")
    head.append(when)
    lines = ["  ".join(head)]
    lines += _table(["GPU", "NAME", "UTIL", "SM", "MEMORY", "TEMP", "POWER", "SM CLOCK",
                     "THROTTLE"], [device_row(d) for d in snap.devices])
    if snap.processes:
        lines.append("")
        rows = [process_row(p, snap.time)
                for p in sorted(snap.processes, key=lambda p: (p.device_index, p.pid))]
        lines += _table(["GPU", "PID", "USER", "JOB", "GPU MEM", "SM", "CPU", "WORKERS",
                         "COMMAND"], rows, last_width=max(20, width - 70))
    else:
        lines += ["", "No processes on the GPUs."]
    lines += [f"! {printable(w)}" for w in snap.warnings]
    return "\n".join(lines) + "\n"


def _table(header: list[str], rows: list[list[str]], last_width: int | None = None) -> list[str]:
    if last_width is not None:
        rows = [[*r[:-1], _clip(r[-1], last_width)] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    out = []
    for r in [header, *rows]:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return out


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"
