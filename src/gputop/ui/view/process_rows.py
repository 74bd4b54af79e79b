"""The process table as data: which rows, in which order, with which cell text.

Pure: a Snapshot, a filter query, a sort and the expanded set go in; rows of short strings come
out. The widget compares them with what it shows and updates only the cells that changed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gputop.model import ChildProcess, Missing, ProcessSample, Snapshot
from gputop.ui.view import format as fmt


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    width: int | None  # None: as wide as the content (JOB, COMMAND)
    right: bool = False  # numbers are right-aligned


COLUMNS: tuple[Column, ...] = (
    Column("gpu", "GPU", 4, right=True),
    Column("pid", "PID", 10, right=True),  # "├ 22104310": a worker's PID under its process
    Column("user", "USER", 9),
    Column("job", "JOB", None),
    Column("gmem", "GPU MEM", 7, right=True),
    Column("sm", "SM%", 4, right=True),
    Column("cpu", "CPU%", 5, right=True),
    Column("rss", "RSS", 6, right=True),
    Column("time", "TIME", 6, right=True),
    Column("cmd", "COMMAND", None),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
JOB_WIDTH = 20  # pod names are long; the detail is a keypress away
COMMAND_LENGTH = 300


@dataclass(frozen=True, slots=True)
class Row:
    key: str  # "gpu:pid" for a GPU process, "gpu:pid/child" for a worker
    cells: tuple[str, ...]  # one per column, in COLUMNS order
    proc: ProcessSample
    child: ChildProcess | None = None
    dim: tuple[str, ...] = ()  # column keys shown muted (a Missing label)


def _cell(v: Any, f: Callable[[Any], str]) -> tuple[str, bool]:
    if isinstance(v, Missing):
        return v.label(), True
    return f(v), False


def _user(v: Any) -> str:
    return str(v)


def process_cells(p: ProcessSample, now: float,
                  marker: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    values: dict[str, tuple[str, bool]] = {
        "gpu": (str(p.device_index), False),
        "pid": (f"{marker}{p.pid}", False),
        "user": _cell(p.user, _user),
        "job": ((p.job.label() if p.job else "")[:JOB_WIDTH], False),
        "gmem": _cell(p.gpu_mem, fmt.size),
        "sm": _cell(p.sm_util, lambda v: f"{v:.0f}"),
        "cpu": _cell(p.cpu_percent, lambda v: f"{v:.0f}"),
        "rss": _cell(p.rss, fmt.size),
        "time": _cell(p.create_time, lambda t: fmt.duration(now - t)),
        "cmd": (fmt.command(p.cmdline, p.name)[:COMMAND_LENGTH], False),
    }
    cells = tuple(values[k][0] for k in COLUMN_KEYS)
    dim = tuple(k for k in COLUMN_KEYS if values[k][1])
    return cells, dim


def child_cells(c: ChildProcess, last: bool) -> tuple[str, ...]:
    values = {
        "pid": f"{'└' if last else '├'} {c.pid}",
        "cpu": f"{c.cpu_percent:.0f}",
        "rss": fmt.size(c.rss),
        "cmd": f"  {c.name}"[:COMMAND_LENGTH],
    }
    return tuple(values.get(k, "") for k in COLUMN_KEYS)


# ---------------------------------------------------------------------------------------------
# Filter: free words match the command, user, job or PID; "user:NAME" and "gpu:N" narrow.


def matches(p: ProcessSample, query: str) -> bool:
    for word in query.lower().split():
        if word.startswith("gpu:"):
            if word[4:] != str(p.device_index):
                return False
        elif word.startswith("user:"):
            if isinstance(p.user, Missing) or not str(p.user).lower().startswith(word[5:]):
                return False
        elif word not in _haystack(p):
            return False
    return True


def _haystack(p: ProcessSample) -> str:
    parts = [str(p.pid), fmt.command(p.cmdline, p.name)]
    if not isinstance(p.user, Missing):
        parts.append(str(p.user))
    if not isinstance(p.name, Missing):
        parts.append(str(p.name))
    if p.job:
        parts.append(p.job.label())
    parts.extend(c.name for c in p.children)
    return " ".join(parts).lower()


# ---------------------------------------------------------------------------------------------
# Sort: by any column; a process's workers always follow it; Missing sorts last either way.


def _sort_value(p: ProcessSample, column: str, now: float) -> Any:
    if column == "gpu":
        return p.device_index
    if column == "pid":
        return p.pid
    if column == "user":
        return p.user
    if column == "job":
        return p.job.label() if p.job else ""
    if column == "gmem":
        return p.gpu_mem
    if column == "sm":
        return p.sm_util
    if column == "cpu":
        return p.cpu_percent
    if column == "rss":
        return p.rss
    if column == "time":
        return p.create_time if isinstance(p.create_time, Missing) else now - p.create_time
    return fmt.command(p.cmdline, p.name).lower()


def sort_processes(procs: Iterable[ProcessSample], column: str, reverse: bool,
                   now: float) -> list[ProcessSample]:
    # Stable tie-break on (gpu, pid) first, then the column, so equal values keep a fixed order.
    ordered = sorted(procs, key=lambda p: (p.device_index, p.pid))
    present = [p for p in ordered if not isinstance(_sort_value(p, column, now), Missing)]
    missing = [p for p in ordered if isinstance(_sort_value(p, column, now), Missing)]
    present.sort(key=lambda p: _sort_value(p, column, now), reverse=reverse)
    return present + missing


def build_rows(snap: Snapshot | None, *, query: str = "", sort: str = "gpu",
               reverse: bool = False, expanded: frozenset[str] | set[str] = frozenset(),
               now: float | None = None) -> list[Row]:
    if snap is None:
        return []
    t = snap.time if now is None else now
    procs = [p for p in snap.processes if not query or matches(p, query)]
    rows: list[Row] = []
    for p in sort_processes(procs, sort, reverse, t):
        open_ = p.key in expanded and bool(p.children)
        marker = ("▼ " if open_ else "▶ ") if p.children else ""
        cells, dim = process_cells(p, t, marker)
        rows.append(Row(p.key, cells, p, None, dim))
        if open_:
            for i, c in enumerate(p.children):
                last = i == len(p.children) - 1
                rows.append(Row(f"{p.key}/{c.pid}", child_cells(c, last), p, c))
    return rows
