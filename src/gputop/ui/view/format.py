"""Pure formatting for the dashboard: numbers to short fixed-width strings, Missing to words.

Values are rounded to what a glance needs, so a cell whose rounded value did not change is not
redrawn (the process table updates only cells whose text changed)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gputop.model import Missing

GiB = 1024**3
MiB = 1024**2
KiB = 1024


def label(v: Any, fmt: Callable[[Any], str] = str) -> str:
    """`fmt(v)`, or the Missing's short label ("n/s", "no perm", "…", ...)."""
    return v.label() if isinstance(v, Missing) else fmt(v)


def size(n: float, *, digits: int = 1) -> str:
    """Bytes in binary units, short: "61.2G", "512M", "16K", "0"."""
    n = float(n)
    for unit, scale in (("T", 1024**4), ("G", GiB), ("M", MiB), ("K", KiB)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.{digits}f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{n:.0f}"


def gib(n: float) -> str:
    """Bytes as GiB without a unit: "61.2", "0.5", "192"."""
    v = n / GiB
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def rate(n: float) -> str:
    """Bytes per second: "12.3G/s"."""
    return f"{size(n)}/s"


def percent(v: float) -> str:
    return f"{v:.0f}%"


def watts(v: float) -> str:
    return f"{v:.0f}W"


def celsius(v: float) -> str:
    return f"{v:.0f}°C"


def mhz(v: float) -> str:
    return f"{v:.0f}"


def duration(seconds: float) -> str:
    """A runtime in at most 6 characters: "42s", "12:34", "5h03m", "3d04h"."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def clock_time(t: float) -> str:
    """Local wall-clock time of an epoch timestamp: "12:34:56"."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def age(seconds: float) -> str:
    """How old data is: "0.4 s", "12 s", "3 min", "2 h"."""
    if seconds < 10:
        return f"{max(0.0, seconds):.1f} s" if seconds < 1 else f"{seconds:.0f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


_REASON_WORDS = {
    "unsupported": "not supported by this GPU/driver/VM",
    "no_permission": "needs privileges gputop lacks",
    "gpu_lost": "the GPU fell off the bus",
    "stale": "stale",
    "pending": "not sampled yet (slower cadence)",
    "not_visible": "in another PID namespace",
    "error": "read failed",
}


def reason_words(m: Missing) -> str:
    """Why a field has no value, in words, for the detail view."""
    words = _REASON_WORDS.get(m.reason, m.reason)
    if m.since is not None:
        words += f" since {clock_time(m.since)}"
    if m.detail:
        words += f": {m.detail}"
    return words


def command(cmdline: Any, name: Any) -> str:
    """A command line for a table cell: the program's base name and its arguments."""
    if not isinstance(cmdline, Missing) and cmdline:
        head, *rest = cmdline
        return " ".join([os.path.basename(head) or head, *rest])
    if not isinstance(name, Missing) and name:
        return str(name)
    if isinstance(cmdline, Missing) and cmdline.reason == "not_visible":
        return "(other PID namespace)"
    return label(cmdline) if isinstance(cmdline, Missing) else ""


_NAME_NOISE = ("NVIDIA ", "Tesla ", "GeForce ", "AMD ", "Radeon ", "Instinct ")


def short_gpu_name(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3": the vendor is in the header already."""
    for noise in _NAME_NOISE:
        name = name.replace(noise, "")
    return name.strip()
