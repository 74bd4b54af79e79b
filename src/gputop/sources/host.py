"""The host side of a tick: the node's CPU, memory and pressure, and who each GPU process is.

GPU sources report PIDs and GPU-side numbers only. `HostSource.enrich` adds the user, command line,
CPU and memory of each process, its DataLoader workers (descendants with no GPU context) and the
container, pod or Slurm job it runs in. psutil gives the per-process facts; `proc_root` gives what
psutil does not: cgroup, environ, PSI, and the parent map (one scan per tick, because psutil's
`children()` scans all of /proc on every call).

NVML reports host PIDs. A PID that does not exist in our PID namespace (gputop in a container) is
kept, with its host facts marked Missing("not_visible"), never dropped.

A process that runs `gputop.probe` publishes its allocator and training-loop numbers to a file
(docs/probe.md); `enrich` reads those of the visible GPU processes once per tick into
`ProcessSample.probe`. Where no probe directory exists that costs a stat or two per user.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import socket
import time
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
)
from gputop.safetext import encodable
from gputop.sources.cpu_times import CpuTimes
from gputop.sources.probe_files import ProbeSample, probe_dirs, read_probes

T = TypeVar("T")

NOT_VISIBLE = Missing("not_visible")
NO_PERMISSION = Missing("no_permission")
ZOMBIE = Missing("error", detail="zombie process")

# The whole of /proc is scanned for new DataLoader workers at most this often; in between, a
# tick reads /proc/PID/stat of the GPU processes and the workers it knows, and nothing else. A
# GPU process not seen before, or a PID reused, scans at once.
SCAN_EVERY_S = 5.0

# A GPU process that is really a launcher of hundreds of processes would otherwise make every
# tick read hundreds of /proc entries; DataLoaders have a few dozen workers at most.
MAX_CHILDREN = 128

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
        self._last_cpu: list[Any] | None = None
        self._psi_unsupported: set[str] = set()
        self._tick = 0
        self._tracked: dict[tuple[int, int], _Tracked] = {}  # by (pid, start time)
        self._table: dict[int, ProcRow] = {}  # the last scan, as kept up by later ticks
        self._tree: dict[int, list[int]] = {}
        self._scanned_at = float("-inf")
        self._start: CpuTimes | None = None  # see start_from
        # Why probe files were skipped at the latest tick: for debugging, never shown per tick.
        self.probe_notes: list[str] = []

    def start_from(self, reading: CpuTimes) -> None:
        """Takes an earlier reading (sources.cpu_times) as the previous sample: the next
        `sample` gives the node's CPU shares since then, and the next `enrich` those of each
        process the reading saw (the same PID and start time); a process it did not see gets
        what it gets on first sight."""
        self._start = reading
        self._last_cpu = list(reading.cores) or None

    # ------------------------------------------------------------------------------------------
    # The node

    def sample(self, now: float) -> HostSample:
        """The node now; CPU figures are for the time since the previous call."""
        ps = self._ps
        per_core, total, iowait = self._cpu_since_last_call()
        vm = ps.virtual_memory()
        return HostSample(
            hostname=self._hostname,
            cpu_count=ps.cpu_count() or len(per_core),
            cpu_percent=total,
            cpu_percent_per_core=per_core,
            iowait_percent=iowait,
            load_avg=_call(ps.getloadavg),
            mem_total=vm.total,
            mem_used=vm.used,
            mem_available=vm.available,
            swap_used=_call(self._swap_used),
            psi_cpu_some=self._psi("cpu"),
            psi_io_some=self._psi("io"),
            psi_mem_some=self._psi("memory"),
        )

    def _swap_used(self) -> int:
        """SwapTotal - SwapFree of /proc/meminfo, as psutil.swap_memory().used, without the
        read of /proc/vmstat it also does (for figures not shown): the larger part of a tick's
        host cost."""
        try:
            with open(f"{self._proc_root}/meminfo", "rb") as f:
                found = dict(line.split()[:2] for line in f if line.startswith(b"Swap"))
            return (int(found[b"SwapTotal:"]) - int(found[b"SwapFree:"])) * 1024
        except (OSError, KeyError, ValueError):
            return int(self._ps.swap_memory().used)

    def _cpu_since_last_call(self) -> tuple[tuple[float, ...], Val[float], Val[float]]:
        """Busy % per core and in total, and iowait %, since the previous call.

        Computed from psutil.cpu_times rather than psutil.cpu_percent(interval=None): psutil keeps
        that one's previous sample per thread, and the poller runs each tick on whichever thread
        of asyncio's pool is free, so "since the last call" would silently mean something else.
        """
        times = list(self._ps.cpu_times(percpu=True))
        last, self._last_cpu = self._last_cpu, times
        if last is None or len(last) != len(times):  # first call, or a CPU went on/offline
            return (), PENDING, PENDING
        pairs = list(zip(last, times, strict=True))
        per_core = tuple(_busy_percent(a, b) for a, b in pairs)
        elapsed = sum(_cpu_total(b) - _cpu_total(a) for a, b in pairs)
        if elapsed <= 0:
            return per_core, PENDING, PENDING
        busy = sum(_cpu_busy(b) - _cpu_busy(a) for a, b in pairs)
        waited = sum(_iowait(b) - _iowait(a) for a, b in pairs)
        return per_core, _percent(busy, elapsed), _percent(waited, elapsed)

    def _psi(self, resource: str) -> Val[float]:
        if resource in self._psi_unsupported:
            return UNSUPPORTED
        try:
            with open(f"{self._proc_root}/pressure/{resource}") as f:
                return parse_psi_some_avg10(f.read())
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
        table, tree = self._process_table(gpu_pids, now) if processes else ({}, {})
        tick = _Tick(now, gpu_pids, table, tree)
        fields_by_pid: dict[int, dict[str, Any]] = {}  # a process on two GPUs is read once
        for p in processes:
            if p.pid not in fields_by_pid:
                fields_by_pid[p.pid] = self._host_fields(p.pid, tick)
        probes = self._probes(tick.uids, now)
        out = [dataclasses.replace(p, **fields_by_pid[p.pid], probe=probes.get(p.pid))
               for p in processes]
        self._start = None  # its processes had their first share
        # Whatever was not seen this tick has exited (or left the GPU): forget it, so the cache
        # stays as small as the process list.
        self._tracked = {k: t for k, t in self._tracked.items() if t.seen == self._tick}
        return out

    def _process_table(self, gpu_pids: frozenset[int], now: float
                       ) -> tuple[dict[int, ProcRow], dict[int, list[int]]]:
        """The process table and its parent -> children map: scanned whole every SCAN_EVERY_S,
        else the last scan with the rows of the GPU processes and their known descendants read
        again (gone ones dropped)."""
        old, tree = self._table, self._tree
        if (0 <= now - self._scanned_at < SCAN_EVERY_S and gpu_pids <= old.keys()
                and all(old[p].start >= 0 for p in gpu_pids)):
            table = dict(old)
            follow = set(gpu_pids)
            for pid in gpu_pids:
                follow.update(descendants(pid, tree, stop_at=frozenset()))
            for pid in follow:
                row = read_proc_row(self._proc_root, pid)
                if row is None:
                    del table[pid]
                elif row.start != old[pid].start:
                    break  # a PID reused since the scan
                else:
                    table[pid] = row
            else:
                if table != old:
                    tree = children_map(table)
                self._table, self._tree = table, tree
                return table, tree
        self._table = read_process_table(self._proc_root)
        self._tree = children_map(self._table)
        self._scanned_at = now
        return self._table, self._tree

    def _host_fields(self, pid: int, tick: _Tick) -> dict[str, Any]:
        try:
            t = self._track(pid, tick)
            if t is None:
                return _HIDDEN_FIELDS
            proc = t.proc
            with proc.oneshot():
                facts = t.facts or self._read_facts(t)
                cpu = self._guard(lambda: self._cpu_percent(t, tick.now))
                rss = self._guard(lambda: proc.memory_info().rss)
        except self._ps.NoSuchProcess:  # exited between the GPU poll and now
            return _HIDDEN_FIELDS
        if type(facts.uid) is int:
            tick.uids[pid] = facts.uid
        return {
            "user": facts.user,
            "name": facts.name,
            "cmdline": facts.cmdline,
            "create_time": facts.create_time,
            "cpu_percent": cpu,
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
                t.cpu_since = (start.time, seen[1])
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
        """The probe payloads of these processes (pid -> uid that runs it). Only the users with a
        probe directory are asked, so a node without probes pays a stat per user and tick. A
        rejected or unreadable file leaves the process without a probe and a line in
        `probe_notes`; it never stops the tick."""
        users = {uid: _has_probe_dir(uid) for uid in set(uids.values())}
        wanted = {pid: uid for pid, uid in uids.items() if users[uid]}
        if not wanted:
            self.probe_notes = []
            return {}
        notes: list[str] = []
        try:
            samples = read_probes(wanted, now, notes)
        except Exception as e:  # the reader should not raise; a monitor must not die of it
            notes.append(f"probe files not read: {type(e).__name__}: {e}")
            samples = {}
        self.probe_notes = notes
        return {pid: probe_stats(s) for pid, s in samples.items()}

    def _cpu_percent(self, t: _Tracked, now: float) -> float:
        """% of one core since the previous tick. On first sight there is no previous sample, so
        report the lifetime average (what `ps` shows) rather than psutil's meaningless 0.0."""
        since_last = t.proc.cpu_percent(interval=None)
        if t.primed:
            return float(since_last)
        t.primed = True
        if t.cpu_since is not None:  # an earlier reading of its CPU time (start_from)
            then, used = t.cpu_since
            ct = t.proc.cpu_times()
            elapsed = time.time() - then
            if elapsed > 0:
                return round(max(0.0, 100.0 * (float(ct.user + ct.system) - used) / elapsed), 1)
        age = now - t.proc.create_time()
        if age <= 0:
            return 0.0
        ct = t.proc.cpu_times()
        return float(100.0 * (ct.user + ct.system) / age)

    def _children(self, pid: int, tick: _Tick) -> tuple[ChildProcess, ...]:
        found = (self._child(c, tick) for c in descendants(pid, tick.tree, stop_at=tick.gpu_pids))
        return tuple(c for c in found if c is not None)

    def _child(self, pid: int, tick: _Tick) -> ChildProcess | None:
        ps = self._ps
        try:
            t = self._track(pid, tick)
            if t is None:
                return None
            with t.proc.oneshot():
                if not t.child_name:
                    t.child_name = encodable(t.proc.name())
                cpu = self._cpu_percent(t, tick.now)
                return ChildProcess(pid, t.child_name, cpu, t.proc.memory_info().rss)
        except (ps.NoSuchProcess, ps.AccessDenied):
            return None  # exited, died (zombie) or not ours to read: not a worker to report

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
    primed: bool = False  # cpu_percent has a previous sample
    cpu_since: tuple[float, float] | None = None  # (time.time(), user + system s) read earlier
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


def _has_probe_dir(uid: int) -> bool:
    for d in probe_dirs(uid):
        try:
            os.stat(d)
            return True
        except OSError:
            continue
    return False


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


def _cpu_total(t: Any) -> float:
    # guest time is already counted in user and nice
    return float(sum(t)) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _iowait(t: Any) -> float:
    return float(getattr(t, "iowait", 0.0))


def _cpu_busy(t: Any) -> float:
    return float(_cpu_total(t) - t.idle - _iowait(t))


def _percent(part: float, whole: float) -> float:
    return min(100.0, max(0.0, 100.0 * part / whole))


def _busy_percent(before: Any, after: Any) -> float:
    elapsed = _cpu_total(after) - _cpu_total(before)
    if elapsed <= 0:
        return 0.0
    return _percent(_cpu_busy(after) - _cpu_busy(before), elapsed)


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
    """One process in /proc/PID/stat."""

    ppid: int
    start: int  # clock ticks after boot: with the PID, the process's identity
    zombie: bool


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
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            stat = f.read()
        # "pid (comm) state ppid ... starttime(22nd) ...": comm may hold spaces and ")"
        fields = stat[stat.rindex(b")") + 2:].split()
        return ProcRow(int(fields[1]), int(fields[19]), fields[0] in (b"Z", b"X"))
    except PermissionError:  # hidepid=1: another user's process, there but unreadable
        return ProcRow(ppid=-1, start=-1, zombie=False)
    except (OSError, ValueError, IndexError):
        return None  # exited while we read


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
