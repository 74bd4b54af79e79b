"""Where to go in a recording: "10:04:20", "-5m", "+90s", "260", "start", "end", told from what
the user typed in the replay's seek box."""

from __future__ import annotations

import bisect
import datetime
import re
import time
from collections.abc import Sequence


class SeekError(ValueError):
    """What the user typed is not a place in the recording; the message says why."""


_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d*)?))?")
_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(min|sec|ms|s|m|h|d)?")
_SECONDS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
            "d": 86400.0, None: 1.0}
SEEK_HELP = "a time (10:04:20), an offset (-5m, +90s, +1h30m) or a tick number (260)"


def parse_duration(text: str) -> float:
    """Seconds in "90", "90s", "5m", "1h30m", "1:30" (m:s) or "1:02:03" (h:m:s)."""
    s = text.strip().lower()
    m = _CLOCK.fullmatch(s)
    if m:
        a, b, c = int(m.group(1)), int(m.group(2)), m.group(3)
        return a * 3600 + b * 60 + float(c) if c is not None else a * 60 + b
    total, pos, found = 0.0, 0, False
    for part in _UNIT.finditer(s):
        if s[pos:part.start()].strip() or (found and part.group(2) is None):
            break
        total += float(part.group(1)) * _SECONDS[part.group(2)]
        pos, found = part.end(), True
    if not found or s[pos:].strip():
        raise SeekError(f"not a duration: {text.strip()!r} (e.g. 90s, 5m, 1h30m)")
    return total


def nearest_tick(times: Sequence[float], t: float) -> int:
    """The tick taken nearest to `t` (the earlier of two as near)."""
    i = bisect.bisect_left(times, t)
    if i == 0:
        return 0
    if i >= len(times):
        return len(times) - 1
    return i - 1 if t - times[i - 1] <= times[i] - t else i


def parse_seek(text: str, times: Sequence[float], position: int) -> int:
    """The tick (from 0) that `text` names, seen from tick `position`; SeekError says why not."""
    s = text.strip().lower()
    n = len(times)
    if n == 0:
        raise SeekError("the recording has no ticks yet")
    if not s:
        raise SeekError(f"type {SEEK_HELP}")
    if s in ("start", "begin", "beginning", "first"):
        return 0
    if s in ("end", "last"):
        return n - 1
    if s[0] in "+-":
        offset = parse_duration(s[1:]) * (-1 if s[0] == "-" else 1)
        return nearest_tick(times, times[position] + offset)
    number = s.removeprefix("tick").removeprefix("#").strip()
    if number.isdigit():
        tick = int(number)
        if not 1 <= tick <= n:
            raise SeekError(f"tick {tick} is not in the recording (1 to {n})")
        return tick - 1
    t = _when(s, times, times[position])
    if t is None:
        raise SeekError(f"{text.strip()!r} is not {SEEK_HELP}")
    first, last = times[0], times[-1]
    if not first - 1.0 <= t <= last + 1.0:
        raise SeekError(f"{text.strip()} is not in the recording ({stamp(first, times)} to "
                        f"{stamp(last, times)})")
    return nearest_tick(times, t)


def _when(s: str, times: Sequence[float], now: float) -> float | None:
    """The epoch time a date and time ("2026-12-01 10:04:20") or a clock time ("10:04:20")
    names, in local time; a clock time on the day of the recording that puts it nearest `now`."""
    m = _CLOCK.fullmatch(s)
    if m is None:
        try:
            return datetime.datetime.fromisoformat(s.upper()).timestamp()
        except ValueError:
            return None
    hh, mm, ss = int(m.group(1)), int(m.group(2)), float(m.group(3) or 0)
    if hh > 23 or mm > 59 or ss >= 60:
        return None
    day = datetime.date.fromtimestamp(times[0])
    last_day = datetime.date.fromtimestamp(times[-1])
    candidates = []
    while day <= last_day:
        whole = datetime.datetime(day.year, day.month, day.day, hh, mm, int(ss))
        candidates.append(whole.timestamp() + ss % 1)
        day += datetime.timedelta(days=1)
    inside = [c for c in candidates if times[0] - 1.0 <= c <= times[-1] + 1.0]
    return min(inside or candidates, key=lambda c: abs(c - now))


def stamp(t: float, times: Sequence[float]) -> str:
    """Local time of day; with the date when the recording spans more than one day."""
    days = {time.localtime(times[0])[:3], time.localtime(times[-1])[:3]} if times else set()
    return time.strftime("%Y-%m-%d %H:%M:%S" if len(days) > 1 else "%H:%M:%S",
                         time.localtime(t))
