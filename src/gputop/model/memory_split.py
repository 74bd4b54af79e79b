"""Where a GPU's memory goes: PyTorch's tensors, PyTorch's cache, and the rest.

NVML sees one number per process: what PyTorch's caching allocator reserved from the driver plus
what the process holds outside the allocator (CUDA context, cuBLAS workspaces, NCCL buffers).
The in-process probe (docs/probe.md) publishes the allocator's side, so a GPU's used memory splits
into four parts:

    allocated    tensors alive now                      probe: allocated
    cached       reserved but free (allocator slack)    probe: reserved - allocated
    non_pytorch  context, NCCL, cuBLAS, other libraries NVML's process memory - probe: reserved
    other        processes without a (fresh) probe      NVML's used - the three above

The probe publishes once a second and NVML is read at the tick, so a process's NVML figure can
fall short of its reserved memory for a tick while the allocator grows; non_pytorch is then 0 and
the shortfall is noted, never a negative segment. Pure functions of a Snapshot: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.snapshot import PROBE_STALE_AFTER_S, ProbeStats, ProcessSample, Snapshot, value

MAX_PROBE_AGE_S = PROBE_STALE_AFTER_S  # as the probe reader: older is a hung or gone process
MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One probed process's memory on one GPU, in bytes."""

    pid: int
    device_index: int
    allocated: int
    cached: int  # reserved - allocated
    non_pytorch: int | None  # NVML - reserved, at least 0; None where NVML gives no figure
    nvml: int | None  # NVML's figure for the process
    short: int = 0  # bytes NVML's figure fell short of reserved (non_pytorch was clamped to 0)

    @property
    def reserved(self) -> int:
        return self.allocated + self.cached

    @property
    def total(self) -> int:
        """What the process holds as far as gputop can tell: NVML's figure, or reserved where
        that is more."""
        return max(self.nvml or 0, self.reserved)


@dataclass(frozen=True, slots=True)
class MemorySplit:
    """One GPU's used memory in four parts (bytes). The parts add up to `used`, except when the
    probes report more than NVML does (then `other` is 0 and the parts exceed `used`)."""

    device_index: int
    total: int  # the GPU's memory
    used: int  # NVML: used by processes
    allocated: int
    cached: int
    non_pytorch: int
    other: int  # processes without a usable probe, and what NVML counts beyond the parts
    processes: tuple[ProcessMemory, ...] = ()
    notes: tuple[str, ...] = ()  # why a process is not split, or why a part was clamped

    @property
    def parts(self) -> tuple[int, int, int, int]:
        return self.allocated, self.cached, self.non_pytorch, self.other


def usable(probe: ProbeStats | None, now: float, max_age: float = MAX_PROBE_AGE_S) -> bool:
    """A probe payload with allocator numbers, published within `max_age` of `now`."""
    if probe is None or probe.allocated is None or probe.reserved is None:
        return False
    if abs(now - probe.ts) > max_age:
        return False
    # Under the cudaMallocAsync backend memory_stats() reads zeros: no split to be had.
    return "cudamallocasync" not in (probe.allocator_conf or "").lower()


def home_processes(snap: Snapshot) -> dict[int, ProcessSample]:
    """pid -> a probed process's entry on the GPU where it holds the most memory, where its
    allocator works. A process with a context on two GPUs appears twice with the same payload;
    the allocator's numbers belong to this GPU alone (the memory split counts them once, the
    diagnostics judge them once)."""
    best: dict[int, ProcessSample] = {}
    for p in snap.processes:
        if p.probe is None:
            continue
        cur = best.get(p.pid)
        if cur is None or (value(p.gpu_mem) or 0) > (value(cur.gpu_mem) or 0):
            best[p.pid] = p
    return best


def home_devices(snap: Snapshot) -> dict[int, int]:
    """pid -> the GPU of `home_processes`."""
    return {pid: p.device_index for pid, p in home_processes(snap).items()}


def process_memory(p: ProcessSample) -> ProcessMemory:
    """The split of one process that has allocator numbers (see `usable`)."""
    probe = p.probe
    assert probe is not None and probe.allocated is not None and probe.reserved is not None
    allocated, reserved = max(probe.allocated, 0), max(probe.reserved, 0)
    nvml = value(p.gpu_mem)
    non_pytorch = short = None
    if nvml is not None:
        non_pytorch = max(nvml - reserved, 0)
        short = max(reserved - nvml, 0)
    return ProcessMemory(pid=p.pid, device_index=p.device_index,
                         allocated=min(allocated, reserved), cached=max(reserved - allocated, 0),
                         non_pytorch=non_pytorch, nvml=nvml, short=short or 0)


def memory_split(snap: Snapshot, index: int, *, max_age: float = MAX_PROBE_AGE_S,
                 homes: dict[int, int] | None = None) -> MemorySplit | None:
    """GPU `index`'s used memory split by the probes of its processes; None when the GPU is lost
    or reports no used memory, or when none of its processes has a usable probe."""
    d = snap.device(index)
    if d is None or d.lost is not None:
        return None
    used, total = value(d.mem_used), value(d.mem_total)
    if used is None or total is None:
        return None
    if homes is None:
        homes = home_devices(snap)
    split: list[ProcessMemory] = []
    notes: list[str] = []
    for p in snap.processes_on(index):
        if p.probe is None or homes.get(p.pid) != index:
            continue
        if not usable(p.probe, snap.time, max_age):
            notes.append(_why_not(p, snap.time, max_age))
            continue
        pm = process_memory(p)
        split.append(pm)
        if pm.nvml is None:
            notes.append(f"PID {p.pid}: NVML gives no memory figure for the process; its "
                         "context and NCCL buffers count as other")
        elif pm.short:
            notes.append(f"PID {p.pid}: NVML shows {pm.short / MiB:,.0f} MiB less than PyTorch "
                         "reserved (read at different moments); non-PyTorch counted as 0")
    if not split:
        return None
    allocated = sum(pm.allocated for pm in split)
    cached = sum(pm.cached for pm in split)
    non_pytorch = sum(pm.non_pytorch or 0 for pm in split)
    other = max(used - allocated - cached - non_pytorch, 0)
    return MemorySplit(device_index=index, total=total, used=used, allocated=allocated,
                       cached=cached, non_pytorch=non_pytorch, other=other,
                       processes=tuple(split), notes=tuple(notes))


def memory_splits(snap: Snapshot, *, max_age: float = MAX_PROBE_AGE_S) -> dict[int, MemorySplit]:
    """The split of every GPU that has one, by GPU index."""
    if not any(p.probe is not None for p in snap.processes):
        return {}  # the common case, a node without probes, costs one pass
    homes = home_devices(snap)
    out = {}
    for d in snap.devices:
        split = memory_split(snap, d.index, max_age=max_age, homes=homes)
        if split is not None:
            out[d.index] = split
    return out


def _why_not(p: ProcessSample, now: float, max_age: float) -> str:
    probe = p.probe
    assert probe is not None
    if probe.allocated is None or probe.reserved is None:
        return f"PID {p.pid}: its probe has no allocator numbers (no CUDA in the process)"
    if abs(now - probe.ts) > max_age:
        return f"PID {p.pid}: its probe is {now - probe.ts:.0f} s old; not used"
    return f"PID {p.pid}: the cudaMallocAsync allocator publishes no numbers to split"
