"""The CPU times a one-shot reads first thing: /proc/stat and every process's, from /proc."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from gputop.sources.cpu_start import read_cpu_start

HZ = os.sysconf("SC_CLK_TCK")
STAT = b"cpu  300 0 30 900 9 0 0 0 0 0\ncpu0 100 0 10 300 3 0 0 0 50 0\nintr 12345\n"


def stat_line(pid: int, comm: str, utime: int, stime: int, start: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime ...
    return (f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} {stime} 7 9 20 0 1 0 "
            f"{start} 1000 100 18446744073709551615\n")


def test_the_node_and_every_process_are_read_in_clock_ticks(tmp_path: Path) -> None:
    (tmp_path / "stat").write_bytes(STAT)
    for pid, comm, u, s, start in ((41, "python3", 250, 50, 1000),
                                   (42, "a (b) c)", 3, 4, 2000)):  # a name with ") " in it
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat_line(pid, comm, u, s, start))
    (tmp_path / "43").mkdir()  # exited between the listing and the read: left out
    (tmp_path / "self").mkdir()

    before = time.time()
    r = read_cpu_start(str(tmp_path))

    assert before <= r.time <= time.time()
    assert r.stat == STAT
    assert r.processes == {41: (1000, 300), 42: (2000, 7)}


def test_a_proc_without_stat_files_gives_an_empty_reading(tmp_path: Path) -> None:
    r = read_cpu_start(str(tmp_path / "nothing"))

    assert r.stat == b"" and r.processes == {}


def test_the_real_proc_matches_psutil() -> None:
    r = read_cpu_start()
    t = psutil.Process().cpu_times()

    start, used = r.processes[os.getpid()]
    assert abs(used / HZ - (t.user + t.system)) < 0.5  # read moments apart
    assert start > 0 and len(r.processes) > 1
    assert r.stat.startswith(b"cpu ")
