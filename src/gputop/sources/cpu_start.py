"""The CPU times of the node and of every process at one moment, read from /proc with the standard
library only, so that a one-shot can take this reading first thing, before it loads the rest of
gputop or opens a GPU.

A CPU share needs two readings of a counter kept in clock ticks (10 ms), far enough apart to mean
something (sources.poller.HOST_RATE_S). A one-shot that takes the first reading at its very start
(`gputop --once` does, in commands.main) has that window run while it loads and opens the GPUs,
instead of sleeping it after them. `HostSource.start_from` takes the reading as its previous
sample: of the node, and of each process that is still the same process (same PID and start
time) when the GPUs list it.
"""

from __future__ import annotations

import os
import time

# Fields of /proc/PID/stat as `stat_fields` gives them (proc(5) numbers them from 1 with the pid
# and comm first: these are its numbers less 3).
STATE, PPID, UTIME, STIME, START = 0, 1, 11, 12, 19


def stat_fields(stat: bytes) -> list[bytes]:
    """The fields of a /proc/PID/stat line after "pid (comm) ", the state first. comm may hold
    spaces and ")", so it ends at the last ")". Raises ValueError on a line without one."""
    return stat[stat.rindex(b")") + 2:].split()


class CpuStart:
    """What `read_cpu_start` read."""

    __slots__ = ("processes", "stat", "time")

    def __init__(self, time: float, stat: bytes, processes: dict[int, tuple[int, int]]) -> None:
        self.time = time  # time.time() of the reading
        self.stat = stat  # /proc/stat as read (b"" where unreadable)
        self.processes = processes  # pid -> (start, utime + stime), in clock ticks


def read_cpu_start(proc_root: str = "/proc") -> CpuStart:
    """/proc/stat, and every process's CPU time, now. What cannot be read is left out: the
    process it concerns gets its first CPU share the way it would without this reading."""
    t0 = time.time()
    try:
        with open(f"{proc_root}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        stat = b""
    processes: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir(proc_root)
    except OSError:
        names = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc_root}/{name}/stat", "rb") as f:
                line = f.read()
            fields = stat_fields(line)
            processes[int(name)] = (int(fields[START]), int(fields[UTIME]) + int(fields[STIME]))
        except (OSError, ValueError, IndexError):
            continue  # exited while we read, or not ours to read
    t1 = time.time()
    return CpuStart(time=(t0 + t1) / 2, stat=stat, processes=processes)
