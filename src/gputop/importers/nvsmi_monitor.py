"""The table `nvidia-smi dmon` and `nvidia-smi pmon` print, read into rows grouped by moment.

Both print a header of two `#` lines (column names, then units), repeated every screenful, and
then one whitespace-separated line per GPU (dmon) or per process (pmon) per interval:

    #Date       Time        gpu    pwr  gtemp  mtemp     sm    mem   ...
    #YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %   ...
     20240104   13:54:35      0     41     34      -      0      0   ...

The Date and Time columns are there with `-o DT` (either alone with `-o D` / `-o T`), and read as
UTC; a time without a date takes its date from `start`, a day later each time the clock wraps. "-"
means no value. Rows are grouped into moments: a row starts the next moment when its time differs
from the moment's first row by half an interval or more, or when its key (GPU, or GPU and pid)
does not come after the previous row's, since nvidia-smi prints each moment in ascending order.
A log without times has moment i at `start + i * interval`, and its first moment says so.

A row with the wrong number of values, or an unreadable date or time, is skipped with a warning.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop.importers.nvsmi_values import ABSENT, classify, unreadable
from gputop.importers.timing import moments_taken
from gputop.model import DeviceSample, HostSample, Missing, ProcessSample, Snapshot, SystemInfo
from gputop.model import mark_all as _mark_all

DASH = Missing("unsupported", detail="no value ('-') in nvidia-smi output")
ALL_ABSENT = dict.fromkeys(DeviceSample._measured, ABSENT)
DAY = 86400.0


@dataclass
class Row:
    number: int  # line number in the file, from 1
    cells: dict[str, str]  # column name (lower case) -> printed value
    time: float | None


@dataclass
class Moment:
    time: float
    rows: list[Row]
    warnings: list[str] = field(default_factory=list)


def is_header(line: str, marker: str) -> bool:
    """True for the column-name line of dmon (`marker` "pwr" or "sm") or pmon ("pid")."""
    if not line.startswith("#"):
        return False
    names = line[1:].lower().split()
    return "gpu" in names and marker in names


def read_moments(text: str, *, kind: str, key: Callable[[Row], Any], rest_in_last: bool,
                 start: float, interval: float, given: Collection[str] = ()) -> list[Moment]:
    """The rows of a dmon or pmon log (`kind` names it in warnings), grouped into moments."""
    columns: list[str] | None = None
    rows: list[Row] = []
    notes: list[tuple[int, str]] = []  # (rows read before it, warning)
    clock = _Clock(start)
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            names = stripped[1:].lower().split()
            if "gpu" in names and "idx" not in names:
                columns = names
            continue
        if columns is None:
            notes.append((len(rows), f"line {number} skipped: no `# gpu ...` header before it"))
            continue
        values = stripped.split(None, len(columns) - 1) if rest_in_last else stripped.split()
        if len(values) != len(columns):
            notes.append((len(rows), f"line {number} skipped: {len(values)} values where the "
                                     f"header names {len(columns)}"))
            continue
        cells = dict(zip(columns, values))
        try:
            when = clock.read(cells.get("date"), cells.get("time"))
        except ValueError as e:
            notes.append((len(rows), f"line {number} skipped: {e}"))
            continue
        if not cells["gpu"].isdigit():
            notes.append((len(rows), f"line {number} skipped: unreadable GPU index "
                                     f"{cells['gpu']!r}"))
            continue
        rows.append(Row(number, cells, when))
    if not rows:
        raise ValueError(f"no line of the {kind} log could be read")
    moments = _group(rows, key, interval, start)
    _attach(moments, rows, notes)
    if rows[0].time is None:
        moments[0].warnings.insert(0, f"the {kind} log has no times: "
                                      + moments_taken(start, interval, given))
    elif clock.undated:
        moments[0].warnings.insert(0, f"the {kind} log has times but no dates (-o T): dates are "
                                      f"taken from --start ({_utc(start)[:10]})")
    return moments


def _group(rows: list[Row], key: Callable[[Row], Any], interval: float,
           start: float) -> list[Moment]:
    moments: list[list[Row]] = []
    for row in rows:
        current = moments[-1] if moments else None
        if current is None:
            moments.append([row])
            continue
        first, last = current[0], current[-1]
        late = (row.time is not None and first.time is not None
                and abs(row.time - first.time) >= interval / 2)
        if late or not key(row) > key(last):
            moments.append([row])
        else:
            current.append(row)
    return [Moment(g[0].time if g[0].time is not None else start + i * interval, g)
            for i, g in enumerate(moments)]


def _attach(moments: list[Moment], rows: list[Row], notes: list[tuple[int, str]]) -> None:
    """Each skipped line's warning goes to the moment of the row read just before it."""
    where = {}
    for i, m in enumerate(moments):
        for r in m.rows:
            where[id(r)] = i
    for before, note in notes:
        i = where[id(rows[before - 1])] if before else 0
        moments[i].warnings.append(note)


class _Clock:
    """Epoch seconds of a row's Date and Time columns (UTC)."""

    def __init__(self, start: float) -> None:
        self.day = start - start % DAY  # for times without a date
        self.last: float | None = None
        self.undated = False

    def read(self, date: str | None, clock: str | None) -> float | None:
        if clock is None:
            return None
        try:
            h, m, s = (int(x) for x in clock.split(":"))
            if not (h < 24 and m < 60 and s < 61):
                raise ValueError
        except ValueError:
            raise ValueError(f"unreadable time {clock!r}") from None
        of_day = h * 3600 + m * 60 + s
        if date is not None:
            digits = date.replace("/", "").replace("-", "")
            try:
                if len(digits) != 8:
                    raise ValueError
                y, mo, d = int(digits[:4]), int(digits[4:6]), int(digits[6:])
                if not (1 <= mo <= 12 and 1 <= d <= 31):
                    raise ValueError
                return float(calendar.timegm((y, mo, d, 0, 0, 0))) + of_day
            except ValueError:
                raise ValueError(f"unreadable date {date!r}") from None
        self.undated = True
        if self.last is not None and of_day < self.last - 3600:
            self.day += DAY  # the clock went past midnight
        self.last = of_day
        return self.day + of_day


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


# ----------------------------------------------------------------------------------------------
# Values


def reading(cells: dict[str, str], *names: str) -> str | Missing:
    """The first of the columns `names` that the table has: its text, or why it has none."""
    for name in names:
        if name in cells:
            text = cells[name]
            return DASH if text == "-" else classify(text)
    return ABSENT


def number(cells: dict[str, str], *names: str, scale: float = 1.0) -> float | Missing:
    r = reading(cells, *names)
    if isinstance(r, Missing):
        return r
    try:
        return float(r) * scale
    except ValueError:
        return unreadable(r)


def integer(cells: dict[str, str], *names: str, scale: int = 1) -> int | Missing:
    v = number(cells, *names, scale=scale)
    return v if isinstance(v, Missing) else round(v)


def snapshot(moment: Moment, devices: Sequence[DeviceSample],
             processes: Sequence[ProcessSample] = ()) -> Snapshot:
    return Snapshot(
        time=moment.time,
        system=SystemInfo(backends=("nvidia-smi",), driver_version=ABSENT, cuda_version=ABSENT,
                          nvml_version=ABSENT, rocm_version=ABSENT),
        host=_mark_all(HostSample(), ABSENT),
        devices=tuple(devices),
        processes=tuple(processes),
        warnings=tuple(moment.warnings),
    )
