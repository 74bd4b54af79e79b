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
from dataclasses import dataclass
from typing import NamedTuple


class CoreTimes(NamedTuple):
    """One core's line of /proc/stat, in seconds, with psutil.cpu_times()'s field names (a kernel
    that lacks the last fields gives 0 for them: they only ever add to a sum)."""

    user: float = 0.0
    nice: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0
    irq: float = 0.0
    softirq: float = 0.0
    steal: float = 0.0
    guest: float = 0.0
    guest_nice: float = 0.0


@dataclass(frozen=True)
class CpuTimes:
    time: float  # time.time() of the reading
    cores: tuple[CoreTimes, ...]  # as psutil.cpu_times(percpu=True); () where unreadable
    processes: dict[int, tuple[int, float]]  # pid -> (start, clock ticks after boot; user+system s)


def read_cpu_times(proc_root: str = "/proc") -> CpuTimes:
    """Every core's and every process's CPU time now. What cannot be read is left out: the
    process it concerns gets its first CPU share the way it would without this reading."""
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.time()
    cores: list[CoreTimes] = []
    try:
        with open(f"{proc_root}/stat", "rb") as f:
            f.readline()  # the total over every core
            for line in f:
                if not line.startswith(b"cpu"):
                    break
                cores.append(CoreTimes(*(int(x) / hz for x in line.split()[1:11])))
    except (OSError, ValueError, TypeError):
        cores = []
    processes: dict[int, tuple[int, float]] = {}
    try:
        names = os.listdir(proc_root)
    except OSError:
        names = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc_root}/{name}/stat", "rb") as f:
                stat = f.read()
            # "pid (comm) state ppid ... utime(14th) stime(15th) ... starttime(22nd) ..."
            fields = stat[stat.rindex(b")") + 2:].split()
            processes[int(name)] = (int(fields[19]), (int(fields[11]) + int(fields[12])) / hz)
        except (OSError, ValueError, IndexError):
            continue  # exited while we read, or not ours to read
    t1 = time.time()
    return CpuTimes(time=(t0 + t1) / 2, cores=tuple(cores), processes=processes)
