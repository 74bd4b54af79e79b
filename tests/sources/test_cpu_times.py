"""The CPU times a one-shot reads first thing: every core's and every process's, from /proc."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from gputop.sources.cpu_times import CoreTimes, read_cpu_times

HZ = os.sysconf("SC_CLK_TCK")


def stat_line(pid: int, comm: str, utime: int, stime: int, start: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime ...
    return (f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} {stime} 7 9 20 0 1 0 "
            f"{start} 1000 100 18446744073709551615\n")


def test_cores_and_processes_are_read_in_seconds(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(
        "cpu  300 0 30 900 9 0 0 0 0 0\n"
        "cpu0 100 0 10 300 3 0 0 0 50 0\n"
        "cpu1 200 0 20 600 6 0 0 0 0 0\n"
        "intr 12345\n")
    for pid, comm, u, s, start in ((41, "python3", 250, 50, 1000),
                                   (42, "a (b) c)", 3, 4, 2000)):  # a name with ") " in it
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat_line(pid, comm, u, s, start))
    (tmp_path / "43").mkdir()  # exited between the listing and the read: left out
    (tmp_path / "self").mkdir()

    before = time.time()
    r = read_cpu_times(str(tmp_path))

    assert before <= r.time <= time.time()
    assert r.cores == (CoreTimes(100 / HZ, 0, 10 / HZ, 300 / HZ, 3 / HZ, 0, 0, 0, 50 / HZ, 0),
                       CoreTimes(200 / HZ, 0, 20 / HZ, 600 / HZ, 6 / HZ, 0, 0, 0, 0, 0))
    assert r.processes == {41: (1000, 300 / HZ), 42: (2000, 7 / HZ)}


def test_a_proc_without_stat_files_gives_an_empty_reading(tmp_path: Path) -> None:
    r = read_cpu_times(str(tmp_path / "nothing"))

    assert r.cores == () and r.processes == {}


def test_the_real_proc_matches_psutil() -> None:
    r = read_cpu_times()
    me = psutil.Process()
    t = me.cpu_times()

    assert len(r.cores) == psutil.cpu_count()
    start, used = r.processes[os.getpid()]
    assert abs(used - (t.user + t.system)) < 0.5  # read moments apart
    assert len(r.processes) > 1
    assert start > 0
