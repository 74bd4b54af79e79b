"""The host side of a tick: the node's CPU, memory and pressure, and who each GPU process is.

GPU sources report PIDs and GPU-side numbers only. `HostSource.enrich` adds the user, command line,
CPU and memory of each process, its DataLoader workers (descendants with no GPU context) and the
container, pod or Slurm job it runs in. psutil gives the facts read once in a process's life (user,
name, command line, start time); `proc_root` gives the rest: the CPU time of each process and
worker from the /proc/PID/stat that the parent map is built of and its memory from statm (psutil's
files, without its objects and calls), the node's CPU times and memory (one read of /proc/stat and
of /proc/meminfo), cgroup, environ and PSI.

NVML reports host PIDs. A PID that does not exist in our PID namespace (gputop in a container) is
kept, with its host facts marked Missing("not_visible"), never dropped.

A process that runs `gputop.probe` publishes its allocator and training-loop numbers to a file
(docs/probe.md); `enrich` reads those of the visible GPU processes once per tick into
`ProcessSample.probe`. Where no probe directory exists that costs a stat or two per user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import socket
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psutil

from gputop.model import (
    PENDING,
    UNSUPPORTED,
    ChildProcess,
    HostSample,
    JobInfo,
    Missing,
    ProbeStats,
    ProcessSample,
    Val,
    replace,
)
from gputop.safetext import encodable
from gputop.sources.base import held
from gputop.sources.cpu_start import PPID, START, STATE, STIME, UTIME, CpuStart, stat_fields
from gputop.sources.probe_files import ProbeSample, read_probes

T = TypeVar("T")

NOT_VISIBLE = Missing("not_visible")
NO_PERMISSION = Missing("no_permission")
ZOMBIE = Missing("error", detail="zombie process")

# The whole of /proc is scanned for new DataLoader workers at most this often; in between, a
# tick reads /proc/PID/stat of the GPU processes and the workers it knows, and nothing else. A
# GPU process not seen before, or a PID reused, scans at once.
SCAN_EVERY_S = 5.0
# Those scans read only the processes started since the last; every FULL_SCAN_EVERY_S one reads
# them all, for what a listing cannot tell: a PID reused by a new process, a worker handed to a
# GPU process that is a child subreaper.
FULL_SCAN_EVERY_S = 60.0

# A GPU process that is really a launcher of hundreds of processes would otherwise make every
# tick read hundreds of /proc entries; DataLoaders have a few dozen workers at most.
MAX_CHILDREN = 128

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of CPU times in /proc
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

_HIDDEN_FIELDS: dict[str, Any] = {
    f: NOT_VISIBLE for f in ("user", "name", "cmdline", "cpu_percent", "rss", "create_time")
}


class HostSource:
    """Implements poller.HostSourceLike. Not thread-safe: the poller calls it from one tick at a
    time."""

    def __init__(self, *, proc_root: str = "/proc", psutil_module: Any = None) -> None:
        self._proc_root = proc_root
        self._ps = psutil_module if psutil_module is not None else psutil
        self._hostname = encodable(socket.gethostname())
        self._last_cpu: list[CpuTimes] | None = None
        self._psi_unsupported: set[str] = set()
        self._tick = 0
        self._tracked: dict[tuple[int, int], _Tracked] = {}  # by (pid, start time)
        self._table: dict[int, ProcRow] = {}  # the last scan, as kept up by later ticks
        self._tree: dict[int, list[int]] = {}
        self._scanned_at = float("-inf")
        self._full_scan_at = float("-inf")
        self._start: CpuStart | None = None  # see start_from
        self._own_at_start: int | None = None  # gputop's own CPU ticks at that reading
        self._files = _ProcFiles(proc_root)  # of the processes read every tick
        # (pid, GPU) -> the process as the GPU source gave it last tick, and as enriched
        self._enriched: dict[tuple[int, int], tuple[ProcessSample, ProcessSample]] = {}
        # Why probe files were skipped at the latest tick: for debugging, never shown per tick.
        self.probe_notes: list[str] = []

    def start_from(self, reading: CpuStart) -> None:
        """Takes an earlier reading (sources.cpu_start) as the previous sample: the next
        `sample` gives the node's CPU shares since then, and the next `enrich` those of each
        process the reading saw (the same PID and start time); a process it did not see gets
        what it gets on first sight."""
        self._start = reading
        self._last_cpu = parse_cpu_times(reading.stat) or None
        own = reading.processes.get(os.getpid())
        self._own_at_start = own[1] if own is not None else None

    def close(self) -> None:
        """Closes the /proc files it keeps open."""
        self._files.close()

    # ------------------------------------------------------------------------------------------
    # The node

    def sample(self, now: float) -> HostSample:
        """The node now; CPU figures are for the time since the previous call."""
        ps = self._ps
        per_core, total, iowait = self._cpu_since_last_call()
        mem = self._memory()
        return HostSample(
            hostname=self._hostname,
            # /proc/stat has a line per online CPU, as many as psutil counts online
            cpu_count=len(per_core) or ps.cpu_count(),
            cpu_percent=total,
            cpu_percent_per_core=per_core,
            iowait_percent=iowait,
            load_avg=_call(os.getloadavg),
            mem_total=mem["total"],
            mem_used=mem["used"],
            mem_available=mem["available"],
            swap_used=mem["swap_used"],
            psi_cpu_some=self._psi("cpu"),
            psi_io_some=self._psi("io"),
            psi_mem_some=self._psi("memory"),
        )

    def _memory(self) -> dict[str, Val[int]]:
        """Total, used and available memory and swap used, from one read of /proc/meminfo.
        Available is the kernel's MemAvailable and used is total - available, as psutil 7 and
        `free` count them; swap used is SwapTotal - SwapFree. A kernel without MemAvailable
        (before 3.14) or one that answers 0 for it gets psutil's estimate."""
        try:
            kib = _meminfo(_read_all(f"{self._proc_root}/meminfo"))
        except (OSError, ValueError) as e:
            why = Missing("error", detail=f"meminfo: {e}")
            return dict.fromkeys(("total", "used", "available", "swap_used"), why)
        total = (kib["MemTotal"] or 0) * 1024
        avail = (kib["MemAvailable"] or 0) * 1024
        if not 0 < avail <= total:
            vm = self._ps.virtual_memory()
            total, avail = vm.total, vm.available
        swap: Val[int] = Missing("unsupported")
        if kib["SwapTotal"] is not None and kib["SwapFree"] is not None:
            swap = (kib["SwapTotal"] - kib["SwapFree"]) * 1024
        return {"total": total, "used": total - avail, "available": avail, "swap_used": swap}

    def _cpu_since_last_call(self) -> tuple[tuple[float, ...], Val[float], Val[float]]:
        """Busy % per core and in total, and iowait %, since the previous call, from the per-CPU
        lines of /proc/stat counted as psutil counts them (guest time is inside user time)."""
        times = read_cpu_times(self._proc_root)
        last, self._last_cpu = self._last_cpu, times
        if last is None or not times or len(last) != len(times):
            # first call, or a CPU went on/offline, or no /proc/stat
            return (), PENDING, PENDING
        pairs = list(zip(last, times, strict=True))
        per_core = tuple(_busy_percent(a, b) for a, b in pairs)
        elapsed = sum(b.total - a.total for a, b in pairs)
        if elapsed <= 0:
            return per_core, PENDING, PENDING
        busy = sum(b.busy - a.busy for a, b in pairs)
        own, self._own_at_start = self._own_at_start, None
        if own is not None:
            # The window from an early reading (start_from) holds gputop's own start: imports,
            # opening the GPUs. The node's share is the rest's (on a 2-core machine the start
            # alone reads as 40 points); a core's share cannot be told apart and keeps it.
            busy = max(busy - max(_own_cpu_ticks() - own, 0), 0)
        waited = sum(b.iowait - a.iowait for a, b in pairs)
        return per_core, _percent(busy, elapsed), _percent(waited, elapsed)

    def _psi(self, resource: str) -> Val[float]:
        if resource in self._psi_unsupported:
            return UNSUPPORTED
        try:
            return parse_psi_some_avg10(_read_all(f"{self._proc_root}/pressure/{resource}")
                                        .decode())
        except FileNotFoundError:  # kernel older than 4.20, or built without PSI
            pass
        except PermissionError:
            return NO_PERMISSION
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:  # EOPNOTSUPP: PSI compiled in but booted psi=0
                return Missing("error", detail=str(e))
        self._psi_unsupported.add(resource)
        return UNSUPPORTED

    # ------------------------------------------------------------------------------------------
    # The processes

    def enrich(self, processes: Sequence[ProcessSample], now: float) -> list[ProcessSample]:
        """Adds the host's facts to GPU processes, in the same order; none is dropped."""
        self._tick += 1
        gpu_pids = frozenset(p.pid for p in processes)
        self._files.begin()
        table, tree = self._process_table(gpu_pids, now) if processes else ({}, {})
        tick = _Tick(now, gpu_pids, table, tree)
        fields_by_pid: dict[int, dict[str, Any]] = {}  # a process on two GPUs is read once
        for p in processes:
            if p.pid not in fields_by_pid:
                fields_by_pid[p.pid] = self._host_fields(p.pid, tick)
        probes = self._probes(tick.uids, now)
        out = []
        last, self._enriched = self._enriched, {}
        for p in processes:
            values = {**fields_by_pid[p.pid], "probe": probes.get(p.pid)}
            key = (p.pid, p.device_index)
            was = last.get(key)
            # The values that held still are last tick's very objects; a process that held
            # still, host facts and all, is last tick's very sample.
            if was is not None and held(values, was[1]) and was[0] is p:
                out.append(self._enriched.setdefault(key, was)[1])
                continue
            q = replace(p, **values)
            self._enriched[key] = (p, q)
            out.append(q)
        self._files.end()
        self._start = None  # its processes had their first share
        # Whatever was not seen this tick has exited (or left the GPU): forget it, so the cache
        # stays as small as the process list.
        self._tracked = {k: t for k, t in self._tracked.items() if t.seen == self._tick}
        return out

    def _process_table(self, gpu_pids: frozenset[int], now: float
                       ) -> tuple[dict[int, ProcRow], dict[int, list[int]]]:
        """The process table and its parent -> children map: scanned every SCAN_EVERY_S (see
        `_rescan`; whole every FULL_SCAN_EVERY_S), else the last scan with the rows of the GPU
        processes and their known descendants read again (gone ones dropped)."""
        old, tree = self._table, self._tree
        if (0 <= now - self._scanned_at < SCAN_EVERY_S and gpu_pids <= old.keys()
                and all(old[p].start >= 0 for p in gpu_pids)):
            table = dict(old)
            follow = set(gpu_pids)
            for pid in gpu_pids:
                follow.update(descendants(pid, tree, stop_at=frozenset()))
            moved = False  # whether the parent map changed (a row's CPU time always does)
            for pid in follow:
                row = self._files.row(pid)
                if row is None:
                    del table[pid]
                    moved = True
                elif row.start != old[pid].start:
                    break  # a PID reused since the scan
                else:
                    was = old[pid]
                    moved = moved or row.ppid != was.ppid or row.zombie != was.zombie
                    table[pid] = row
            else:
                if moved:
                    tree = children_map(table)
                self._table, self._tree = table, tree
                return table, tree
        scanned = None
        if 0 <= now - self._full_scan_at < FULL_SCAN_EVERY_S:
            scanned = self._rescan(old, tree, gpu_pids)
        if scanned is None:
            scanned = read_process_table(self._proc_root)
            self._full_scan_at = now
        self._table, self._tree = scanned, children_map(scanned)
        self._scanned_at = now
        return self._table, self._tree

    def _rescan(self, old: dict[int, ProcRow], tree: dict[int, list[int]],
                gpu_pids: frozenset[int]) -> dict[int, ProcRow] | None:
        """The last table brought up to date at the cost of a listing of /proc: the rows of
        the processes started since (a new worker is one of them: a process is younger than
        its parent) and of the GPU processes and their descendants are read, those gone are
        dropped, and the rest are kept as they were (they are not reported, and a process's
        parent changes only when that parent dies). None when a full scan is needed: /proc
        could not be listed, or a followed PID was reused."""
        try:
            live = {int(name) for name in os.listdir(self._proc_root) if name.isdigit()}
        except OSError:
            return None
        table = {pid: row for pid, row in old.items() if pid in live}
        follow = set(gpu_pids)
        for pid in gpu_pids:
            follow.update(descendants(pid, tree, stop_at=frozenset()))
        for pid in (live - old.keys()) | (follow & live):
            row = read_proc_row(self._proc_root, pid)
            if row is None:
                table.pop(pid, None)
            elif pid in old and row.start != old[pid].start:
                return None
            else:
                table[pid] = row
        return table

    def _host_fields(self, pid: int, tick: _Tick) -> dict[str, Any]:
        try:
            t = self._track(pid, tick)
            if t is None:
                return _HIDDEN_FIELDS
            if t.facts is None:
                with t.proc.oneshot():
                    self._read_facts(t)
        except self._ps.NoSuchProcess:  # exited between the GPU poll and now
            return _HIDDEN_FIELDS
        facts = t.facts
        assert facts is not None
        row = tick.table[pid]
        rss = self._rss(pid, row)
        if rss is None:  # exited between the GPU poll and now
            return _HIDDEN_FIELDS
        if type(facts.uid) is int:
            tick.uids[pid] = facts.uid
        return {
            "user": facts.user,
            "name": facts.name,
            "cmdline": facts.cmdline,
            "create_time": facts.create_time,
            "cpu_percent": self._cpu_percent(t, row, tick.now),
            "rss": rss,
            "job": facts.job,
            "children": self._children(pid, tick),
        }

    def _track(self, pid: int, tick: _Tick) -> _Tracked | None:
        """The cached process for this PID, or None when it does not exist in our PID namespace.

        The identity is (pid, start time), both from this tick's scan: a reused PID gets a new
        entry and a fresh CPU baseline, and a known process costs no psutil.Process() (which
        re-reads /proc/stat for the boot time, a large file on a many-core host)."""
        row = tick.table.get(pid)
        if row is None:
            return None
        key = (pid, row.start)
        t = self._tracked.get(key)
        if t is None:
            try:
                t = self._tracked[key] = _Tracked(self._ps.Process(pid))
            except self._ps.NoSuchProcess:
                return None
            start = self._start
            seen = start.processes.get(pid) if start is not None else None
            if start is not None and seen is not None and seen[0] == row.start:
                t.cpu = (seen[1], start.time)  # the previous sample of _cpu_percent
        t.seen = self._tick
        return t

    def _read_facts(self, t: _Tracked) -> _Facts:
        """What does not change while the process lives: read once."""
        proc = t.proc
        t.facts = _Facts(
            # Any byte but NUL may be in a name or an argument: what is not UTF-8 is escaped.
            user=self._guard(lambda: encodable(proc.username())),
            name=self._guard(lambda: encodable(proc.name())),
            cmdline=self._guard(lambda: tuple(encodable(a) for a in proc.cmdline())),
            create_time=self._guard(proc.create_time),
            job=read_job(self._proc_root, proc.pid),
            uid=self._guard(lambda: proc.uids().real),
        )
        return t.facts

    def _probes(self, uids: Mapping[int, int], now: float) -> dict[int, ProbeStats]:
        """The probe payloads of these processes (pid -> uid that runs it). Each user's probe
        directories are listed once a tick and only the files listed are read, so a node without
        probes pays a failed listing per directory and user. A rejected or unreadable file
        leaves the process without a probe and a line in `probe_notes`; it never stops the
        tick."""
        if not uids:
            self.probe_notes = []
            return {}
        notes: list[str] = []
        try:
            samples = read_probes(dict(uids), now, notes)
        except Exception as e:  # the reader should not raise; a monitor must not die of it
            notes.append(f"probe files not read: {type(e).__name__}: {e}")
            samples = {}
        self.probe_notes = notes
        return {pid: probe_stats(s) for pid, s in samples.items()}

    def _cpu_percent(self, t: _Tracked, row: ProcRow, now: float) -> Val[float]:
        """% of one core since the previous tick, from this tick's /proc/PID/stat, as psutil's
        cpu_percent() counts it. On first sight there is no previous sample, so report the
        lifetime average (what `ps` shows) rather than psutil's meaningless 0.0."""
        if not row.readable:
            return NO_PERMISSION
        last, t.cpu = t.cpu, (row.cpu, now)
        if last is not None:
            elapsed = now - last[1]
            if elapsed <= 0:
                return 0.0
            return round(100.0 * (row.cpu - last[0]) / CLOCK_TICKS / elapsed, 1)
        created: Any = None
        if t.facts is not None:
            created = t.facts.create_time
        else:
            with contextlib.suppress(self._ps.Error):
                created = t.proc.create_time()
        if not isinstance(created, float) or now <= created:
            return 0.0
        return float(100.0 * row.cpu / CLOCK_TICKS / (now - created))

    def _children(self, pid: int, tick: _Tick) -> tuple[ChildProcess, ...]:
        found = (self._child(c, tick) for c in descendants(pid, tick.tree, stop_at=tick.gpu_pids))
        return tuple(c for c in found if c is not None)

    def _child(self, pid: int, tick: _Tick) -> ChildProcess | None:
        ps = self._ps
        row = tick.table[pid]
        if not row.readable:
            return None  # not ours to read: not a worker to report
        try:
            t = self._track(pid, tick)
            if t is None:
                return None
            if not t.child_name:
                t.child_name = encodable(t.proc.name())
        except (ps.NoSuchProcess, ps.AccessDenied):
            return None  # exited, died (zombie) or not ours to read: not a worker to report
        rss = self._rss(pid, row)
        if not isinstance(rss, int):
            return None  # exited since
        cpu = self._cpu_percent(t, row, tick.now)
        return ChildProcess(pid, t.child_name, cpu if isinstance(cpu, float) else 0.0, rss)

    def _rss(self, pid: int, row: ProcRow) -> Val[int] | None:
        """Resident memory, bytes, from /proc/PID/statm as psutil reads it (/proc/PID/stat's
        figure is the kernel's per-CPU estimate, off by up to a batch of pages per CPU). None
        when the process is gone."""
        if not row.readable:
            return NO_PERMISSION
        try:
            return int(self._files.read(pid, "statm").split()[1]) * PAGE_SIZE
        except PermissionError:
            return NO_PERMISSION
        except (OSError, ValueError, IndexError):
            return None

    def _guard(self, read: Callable[[], T]) -> Val[T]:
        """One attribute: a permission problem costs that field only. NoSuchProcess (the whole
        process went away) is left to the caller."""
        ps = self._ps
        try:
            return read()
        except ps.ZombieProcess:  # before NoSuchProcess: it is a subclass
            return ZOMBIE
        except ps.AccessDenied:
            return NO_PERMISSION


@dataclass
class _Tracked:
    """A process followed across ticks. psutil keeps the previous CPU times on the Process object,
    which is what makes cpu_percent() "since the last tick"."""

    proc: Any  # psutil.Process
    seen: int = 0  # the last tick that saw it
    cpu: tuple[int, float] | None = None  # CPU clock ticks at the previous tick, and its time
    facts: _Facts | None = None  # for GPU processes
    child_name: str = ""  # for workers


@dataclass(frozen=True, slots=True)
class _Facts:
    user: Val[str]
    name: Val[str]
    cmdline: Val[tuple[str, ...]]
    create_time: Val[float]
    job: JobInfo | None
    uid: Val[int]  # real uid: whose probe directory to read


@dataclass(frozen=True, slots=True)
class _Tick:
    """What one enrich() call shares between its processes."""

    now: float
    gpu_pids: frozenset[int]
    table: dict[int, ProcRow]
    tree: dict[int, list[int]]
    uids: dict[int, int] = dataclasses.field(default_factory=dict)  # visible GPU pid -> uid


def probe_stats(s: ProbeSample) -> ProbeStats:
    """The model's view of one probe payload."""
    return ProbeStats(
        ts=s.ts, device=s.device, allocated=s.allocated, reserved=s.reserved, active=s.active,
        inactive_split=s.inactive_split, peak_allocated=s.peak_allocated,
        peak_reserved=s.peak_reserved, num_alloc_retries=s.num_alloc_retries,
        num_ooms=s.num_ooms, allocator_conf=s.allocator_conf, steps=s.steps,
        step_time_s=s.step_time_s, loader_wait_s=s.loader_wait_s, wait_frac=s.wait_frac,
        recent_wait_frac=s.recent_wait_frac, batch_sizes=s.batch_sizes)


# ----------------------------------------------------------------------------------------------
# CPU accounting, as psutil does it on Linux


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """One CPU's line of /proc/stat, in clock ticks: all of its time (guest time is already
    counted in user and nice), the busy part (neither idle nor waiting on I/O), and iowait."""

    total: int
    busy: int
    iowait: int


def parse_cpu_times(text: bytes) -> list[CpuTimes]:
    """The per-CPU lines of /proc/stat (`cpuN user nice system idle iowait irq softirq steal
    guest guest_nice`; older kernels stop earlier), not the first line, which sums them."""
    out = []
    for line in text.splitlines():
        if not line.startswith(b"cpu") or line.startswith(b"cpu "):
            continue
        v = [int(x) for x in line.split()[1:11]]
        v += [0] * (10 - len(v))
        total = sum(v) - v[8] - v[9]
        out.append(CpuTimes(total=total, busy=total - v[3] - v[4], iowait=v[4]))
    return out


def _own_cpu_ticks() -> int:
    """This process's user + system CPU time, in clock ticks as /proc counts them."""
    t = os.times()
    return round((t.user + t.system) * CLOCK_TICKS)


def read_cpu_times(proc_root: str) -> list[CpuTimes]:
    """Each online CPU's times; none when /proc/stat cannot be read."""
    try:
        return parse_cpu_times(_read_all(f"{proc_root}/stat"))
    except (OSError, ValueError):
        return []


def _percent(part: float, whole: float) -> float:
    return min(100.0, max(0.0, 100.0 * part / whole))


def _busy_percent(before: CpuTimes, after: CpuTimes) -> float:
    elapsed = after.total - before.total
    if elapsed <= 0:
        return 0.0
    return _percent(after.busy - before.busy, elapsed)


def _call(read: Callable[[], T]) -> Val[T]:
    try:
        return read()
    except (OSError, RuntimeError) as e:  # psutil raises RuntimeError where /proc lacks a file
        return Missing("error", detail=str(e))


# ----------------------------------------------------------------------------------------------
# /proc readers


def parse_psi_some_avg10(text: str) -> Val[float]:
    """`some avg10=1.23 avg60=... total=...` -> 1.23: % of the last 10 s some task was stalled."""
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "some":
            for item in rest.split():
                key, _, val = item.partition("=")
                if key == "avg10":
                    return float(val)
    return Missing("error", detail="no 'some avg10' in PSI file")


@dataclass(frozen=True, slots=True)
class ProcRow:
    """One process in /proc/PID/stat. A row of -1s is a process that is there but whose stat
    may not be read (/proc mounted with hidepid=1, another user's process)."""

    ppid: int
    start: int  # clock ticks after boot: with the PID, the process's identity
    zombie: bool
    cpu: int = -1  # user + system time, clock ticks

    @property
    def readable(self) -> bool:
        return self.start >= 0


def read_process_table(proc_root: str) -> dict[int, ProcRow]:
    """Every process in this PID namespace, from one read of each /proc/PID/stat."""
    table: dict[int, ProcRow] = {}
    try:
        names = os.listdir(proc_root)
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            row = read_proc_row(proc_root, int(name))
            if row is not None:
                table[int(name)] = row
    return table


def read_proc_row(proc_root: str, pid: int) -> ProcRow | None:
    """/proc/PID/stat as a ProcRow; None when the process is gone."""
    return _proc_row(_read_small, f"{proc_root}/{pid}/stat")


def _proc_row(read: Callable[[str], bytes], path: str) -> ProcRow | None:
    try:
        fields = stat_fields(read(path))
        return ProcRow(int(fields[PPID]), int(fields[START]), fields[STATE] in (b"Z", b"X"),
                       cpu=int(fields[UTIME]) + int(fields[STIME]))
    except PermissionError:  # hidepid=1: another user's process, there but unreadable
        return ProcRow(ppid=-1, start=-1, zombie=False)
    except (OSError, ValueError, IndexError):
        return None  # exited while we read


class _ProcFiles:
    """/proc/PID/stat and statm of the processes read every tick (each GPU process and its
    workers: a node training with DataLoaders has dozens), each opened once and read again from
    its start. A file stays its process's: once the process has exited it answers ESRCH, even
    where its PID was reused. A file not read for a whole tick is closed."""

    def __init__(self, proc_root: str) -> None:
        self._root = proc_root
        self._fds: dict[str, int] = {}  # "PID/name" -> fd
        self._read: set[str] = set()  # read since `begin`

    def row(self, pid: int) -> ProcRow | None:
        """`read_proc_row` through the kept file."""
        return _proc_row(self._pread, f"{pid}/stat")

    def read(self, pid: int, name: str) -> bytes:
        """The whole of /proc/PID/name (at most a page). Raises what os.open or os.pread
        raises; a file that cannot be read is closed."""
        return self._pread(f"{pid}/{name}")

    def _pread(self, key: str) -> bytes:
        fd = self._fds.get(key)
        if fd is None:
            fd = self._fds[key] = os.open(f"{self._root}/{key}", os.O_RDONLY | os.O_CLOEXEC)
        self._read.add(key)
        try:
            return os.pread(fd, 4096, 0)
        except OSError:
            self._close(key)
            raise

    def begin(self) -> None:
        self._read = set()

    def end(self) -> None:
        for key in self._fds.keys() - self._read:
            self._close(key)

    def close(self) -> None:
        for key in list(self._fds):
            self._close(key)

    def _close(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        self._read.discard(key)
        if fd is not None:
            os.close(fd)


_MEMINFO = re.compile(rb"^(MemTotal|MemAvailable|SwapTotal|SwapFree):\s+(\d+)", re.M)


def _meminfo(text: bytes) -> dict[str, int | None]:
    """The lines of /proc/meminfo the host sample needs, in KiB (None where absent)."""
    kib: dict[str, int | None] = dict.fromkeys(("MemTotal", "MemAvailable", "SwapTotal",
                                                "SwapFree"))
    for m in _MEMINFO.finditer(text):
        kib[m[1].decode()] = int(m[2])
    return kib


def _read_all(path: str) -> bytes:
    """A whole /proc file, without the file object `open` builds: read every tick."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks)


def _read_small(path: str) -> bytes:
    """A /proc file of at most a page, without the file object `open` builds: a full scan
    reads one of these per process on the node."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def children_map(table: Mapping[int, ProcRow]) -> dict[int, list[int]]:
    """parent PID -> child PIDs. Zombies are left out: a dead worker is not a worker."""
    tree: dict[int, list[int]] = {}
    for pid, row in table.items():
        if not row.zombie:
            tree.setdefault(row.ppid, []).append(pid)
    return tree


def descendants(pid: int, tree: Mapping[int, list[int]], *, stop_at: frozenset[int]
                ) -> Iterator[int]:
    """Children, grandchildren... of `pid`, breadth first, at most MAX_CHILDREN. A descendant in
    `stop_at` (a GPU process of its own) is skipped with its subtree: its workers are its own."""
    queue = deque(tree.get(pid, ()))
    seen = {pid}
    count = 0
    while queue and count < MAX_CHILDREN:
        child = queue.popleft()
        if child in seen or child in stop_at:
            continue
        seen.add(child)
        count += 1
        yield child
        queue.extend(tree.get(child, ()))


# ----------------------------------------------------------------------------------------------
# Container, pod, Slurm job

_SCOPE_RUNTIMES = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o",
                   "libpod": "podman"}
_SCOPE = re.compile(r"(?:^|/)(docker|cri-containerd|crio|libpod)-([0-9a-f]{64})\.scope(?:/|$)")
_DOCKER_CGROUPFS = re.compile(r"(?:^|/)docker/([0-9a-f]{64})(?:/|$)")
# Pod UIDs: a UUID (dashes, or underscores in systemd slice names), or 32 hex for static pods.
_POD = re.compile(r"(?:^|/)kubepods\b.*?pod([0-9a-f]{8}[-_]?(?:[0-9a-f]{4}[-_]?){3}[0-9a-f]{12})"
                  r"(?:\.slice)?(?:/|$)")
_POD_CONTAINER = re.compile(r"/pod[0-9a-f_-]+/([0-9a-f]{64})(?:/|$)")  # cgroupfs driver
_LXC = re.compile(r"(?:^|/)(?:lxc/|lxc\.payload[./])([^/]+)")
# v1: slurm[_<node>]/uid_N/job_N/step_S; v2: [<node>_]slurmstepd.scope/job_N/step_S
_SLURM_JOB = re.compile(
    r"(?:^|/)(?:slurm(?:_[^/]+)?/uid_\d+|(?:[^/]+_)?slurmstepd\.scope)/job_(\d+)(?:/|$)"
)
_SERVICE = re.compile(r"([^/]+\.service)(?:/|$)")

JOB_TEXT_MAX = 253  # the longest name Kubernetes gives a pod (a DNS subdomain)

# Variables set by the Kubernetes downward API in common manifests. HOSTNAME is not one of them:
# it is the pod name only until someone sets hostname or runs with hostNetwork.
_ENV_FIELDS = {
    "SLURM_JOB_ID": "slurm_job_id",
    "POD_NAME": "pod_name",
    "K8S_POD_NAME": "pod_name",
    "KUBERNETES_POD_NAME": "pod_name",
    "POD_NAMESPACE": "pod_namespace",
    "K8S_POD_NAMESPACE": "pod_namespace",
    "KUBERNETES_NAMESPACE": "pod_namespace",
}


def read_job(proc_root: str, pid: int) -> JobInfo | None:
    """The container, pod, Slurm job or systemd service of a process, from its cgroup and, when we
    may read it (same user or root), its environment. None when it runs in none of them."""
    found: dict[str, str] = {}
    try:
        with open(f"{proc_root}/{pid}/cgroup", errors="surrogateescape") as f:
            found = parse_cgroup(encodable(f.read()))
    except OSError:
        pass
    try:
        with open(f"{proc_root}/{pid}/environ", "rb") as f:
            env = parse_environ(f.read())
    except OSError:  # PermissionError for other users' processes: less to say, not an error
        env = {}
    for key, field in _ENV_FIELDS.items():
        if env.get(key):
            found.setdefault(field, env[key])
    return JobInfo(**found) if found else None


def parse_cgroup(text: str) -> dict[str, str]:
    """JobInfo fields from /proc/PID/cgroup, cgroup v1 (a line per controller) or v2 (`0::/path`).
    v1 controllers may disagree (Slurm confines some, systemd names others): the first line that
    says something wins for each field."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for field, val in _parse_cgroup_path(path).items():
            found.setdefault(field, val)
    # A unit is worth naming only for a process in no container or job (a plain service).
    if found.keys() - {"systemd_unit"}:
        found.pop("systemd_unit", None)
    return found


def _parse_cgroup_path(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if m := _SCOPE.search(path):
        out["container_runtime"] = _SCOPE_RUNTIMES[m.group(1)]
        out["container_id"] = m.group(2)
    elif m := _DOCKER_CGROUPFS.search(path):
        out["container_runtime"] = "docker"
        out["container_id"] = m.group(1)
    elif m := _POD_CONTAINER.search(path):
        out["container_id"] = m.group(1)  # the runtime is not in the path
    elif m := _LXC.search(path):
        out["container_runtime"] = "lxc"
        out["container_id"] = m.group(1)
    if m := _POD.search(path):
        out["pod_uid"] = m.group(1).replace("_", "-")
    if m := _SLURM_JOB.search(path):
        out["slurm_job_id"] = m.group(1)
    services = _SERVICE.findall(path)
    if services:
        out["systemd_unit"] = services[-1]
    return out


def parse_environ(data: bytes) -> dict[str, str]:
    """Only the variables JobInfo uses, from NUL-separated /proc/PID/environ, each cut to
    JOB_TEXT_MAX characters: a process sets its own environment, as long as it likes."""
    env = {}
    for item in data.split(b"\0"):
        key, sep, val = item.partition(b"=")
        name = key.decode("ascii", "replace")
        if sep and name in _ENV_FIELDS:
            text = val[:4 * JOB_TEXT_MAX].decode("utf-8", "replace")
            env[name] = text if len(text) <= JOB_TEXT_MAX else text[:JOB_TEXT_MAX - 1] + "…"
    return env
