"""`mem.growth` and `mem.pressure`: device memory that keeps growing, or is nearly full.

From outside the process NVML sees the allocator's reserved memory plus the CUDA context
(docs/diagnostics.md §0.7), so steady growth there is memory the job keeps and never gives back: a
leak, or a cache without a bound. A straight-line fit over the last minute (and the last ten, for
slow leaks) gives the rate and, against the free memory, the time left before an out-of-memory
error. A trained model's memory is flat between steps, and a caching allocator grows in steps: a
single step fits a line poorly (R² at most 0.75 for a step mid-span), so the fit quality keeps them
out.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

from gputop.diagnose.types import Condition, Diagnostic
from gputop.diagnose.window import (
    busy_mean,
    column,
    command,
    device_at,
    devices,
    field_readings,
    field_values,
    gib,
    last,
    least_squares,
    number,
    readings,
    times,
)
from gputop.model import DeviceSample, ProcessSample, Snapshot

MiB = 1 << 20
FIT_SPANS_S = (60.0, 600.0)  # the short span reacts fast, the long one sees slow leaks
MIN_COVER = 0.8  # share of a span that must hold samples
MIN_R2 = 0.9  # steady growth, not a step
MIN_GROWTH = 512 * MiB  # over the span: below this, allocator noise
WARMUP_S = 60.0  # a process's first minute is loading weights and the first steps (R1 uses the
# same age)
CRITICAL_TTO_S = 300.0  # out of memory within 5 min
GROWTH_FOR_S = 30.0
GROWTH_CLEAR_S = 120.0  # a leak that pauses for a checkpoint is the same leak
# mem.oom_soon: the same straight line over the last 10 s, against the free memory. A leak of
# ~0.9 GiB/s fills an 80 GiB card in about a minute, sooner than the fits above can speak (their
# warm-up, coverage and hold add up to more than two minutes), so a short span projects it.
SOON_FIT_S = 10.0  # 10 s: 20 samples at 2 Hz, 10 at 1 Hz, for a fit that a single step fails
SOON_MIN_POINTS = 5
SOON_MIN_GROWTH = 256 * MiB  # over the span: below this (25 MiB/s), not filling a card soon
SOON_S = 120.0  # out of memory within 2 min at this rate: warn, whatever the process's age
# ... while the GPU computes (a leak grows as steps run). Loading weights grows as fast with the
# GPU idle and then stops short of full (a healthy 7B load: 14 GiB at ~1 GiB/s with 75 GiB free,
# 75 s from full at that rate), so with the GPU not computing only an overfill within 30 s (one
# the load will not stop short of in time) is named.
SOON_LOAD_S = 30.0
COMPUTING = 50.0  # busy % (GPM graphics activity, else NVML util) over the fit span
# A leak grows from sample to sample; a job's first steps grow the caching allocator in a few
# jumps (weights, optimizer state, activations) that a line can fit as well. At least 40 % of
# the samples must rise over the one before (a jump every other 2 Hz sample still counts).
SOON_RISING = 0.4
SOON_CRITICAL_S = 60.0  # ... within 1 min: critical
# Shown after 5 s more of the same (8 s of fit + 5 s: ~13 s of steady growth): loading weights at
# disk speed usually ends before that, and one that goes on towards filling the card is news.
SOON_FOR_S = 5.0
SOON_CLEAR_S = 5.0  # once the growth stops the fit fails within a few samples: close soon after
PRESSURE_SHARE = 0.95  # R7 mem.near_oom: reserved peak > 0.95 of total ...
PRESSURE_FOR_S = 60.0  # ... for 1 min ...
# ... while it still fills: a card held full and flat is a framework's pool (TensorFlow, JAX and
# vLLM take 90 % and more up front; a real V100 job ran at a flat 95 % for its whole log), not a
# coming out-of-memory error. Grown by this much over the last PRESSURE_FOR_S.
PRESSURE_GROWTH = 256 * MiB

GROWTH_FIX = ("Look for tensors kept across steps: losses or outputs accumulated without "
              ".detach() or .item(), growing lists or caches, retain_graph=True. Compare "
              "torch.cuda.memory_allocated() between steps, or record a memory snapshot with "
              "torch.cuda.memory._record_memory_history().")
PRESSURE_FIX = ("Reduce the batch or sequence length, use activation checkpointing, bf16 or 8-bit "
                "optimizer states, ZeRO/FSDP; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "against fragmentation.")


def _free(d: DeviceSample) -> float | None:
    free = number(d.mem_free)
    if free is not None:
        return free
    total, used = number(d.mem_total), number(d.mem_used)
    if total is None or used is None:
        return None
    return total - used - (number(d.mem_reserved) or 0.0)


def _growth(ts: list[float], vs: list[float]) -> tuple[float, float, float, float] | None:
    """(slope B/s, R², growth over the span, span) for the first fit span that shows growth,
    over samples at times `ts` (oldest first) of values `vs`."""
    for fit_s in FIT_SPANS_S:
        if not ts or ts[-1] - ts[0] < MIN_COVER * fit_s:
            continue
        i = bisect.bisect_left(ts, ts[-1] - fit_s)
        if not _may_grow(vs[i:]):
            continue
        fit = least_squares(ts[i:], vs[i:])
        if fit is None:
            continue
        slope, r2 = fit
        length = ts[-1] - ts[i]
        if r2 >= MIN_R2 and slope * length >= MIN_GROWTH:
            return slope, r2, slope * length, length
    return None


def _may_grow(vs: list[float]) -> bool:
    """False where no straight line through `vs` can grow MIN_GROWTH over their span: the fit's
    growth is at most the spread of the values times sqrt(n / 2), whatever the times."""
    if len(vs) < 3:
        return True  # linear_fit says no
    return (max(vs) - min(vs)) * math.sqrt(len(vs) / 2) >= MIN_GROWTH / 2  # 2: a safe margin


def _memory_at(s: Snapshot, index: int, pid: int) -> float | None:
    for p in s.processes:
        if p.pid == pid and p.device_index == index:
            return number(p.gpu_mem)
    return None


def _process_points(window: Sequence[Snapshot], index: int,
                    pid: int) -> tuple[list[float], list[float]]:
    """Times and memory of a process once it is past its first minute."""
    col = column(window, _memory_born, pid)
    born = next((b for b in col if b is not None), None)
    if born is None:
        return [], []
    start = bisect.bisect_left(times(window), WARMUP_S, key=lambda t: t - born)
    return readings(window[start:], _memory_at, index, pid)


def _memory_born(s: Snapshot, pid: int) -> float | None:
    """When the process started, at a tick where it reports its memory on some GPU."""
    for p in s.processes:
        if p.pid == pid and number(p.gpu_mem) is not None:
            return number(p.create_time) or s.time
    return None


def check_growth(window: Sequence[Snapshot]) -> list[Condition]:
    if not window:
        return []
    recent = last(window, SOON_FIT_S)
    newest = window[-1]
    on = _on_devices(newest)
    out = []
    for index in devices(window):
        d = device_at(newest, index)
        if d is None:
            continue
        procs = on.get(index, {})
        if any(number(p.gpu_mem) is not None for p in procs.values()):
            by_pid = {pid: pts for pid in procs
                      if (pts := _process_points(window, index, pid))[0]}
        else:  # no per-process memory: the device's
            by_pid = {-1: field_readings(window, index, "mem_used")}
        free = _free(d)
        for pid, (ts, vs) in by_pid.items():
            g = _growth(ts, vs)
            # Where mem.oom_soon says it, it says so with the sooner projection.
            if g is not None and _soon(recent, index, pid, free) is None:
                out.append(_growth_condition(d, procs.get(pid), vs[-1], g))
    return out


def _growth_condition(d: DeviceSample, p: ProcessSample | None, now_bytes: float,
                      g: tuple[float, float, float, float]) -> Condition:
    slope, r2, grown, length = g
    free = _free(d)
    tto = free / slope if free is not None and slope > 0 else None
    gpu = f"GPU{d.index}"
    who = f"{gpu} PID {p.pid} `{command(p)}`" if p is not None else gpu
    when = f": out of memory in ~{_duration(tto)} at this rate" if tto is not None else ""
    severity = "critical" if tto is not None and tto < CRITICAL_TTO_S else "warning"
    evidence = {"rate_mib_s": slope / MiB, "r2": r2, "growth_gib": gib(grown),
                "fit_span_s": length, "used_gib": gib(now_bytes)}
    if free is not None:
        evidence["free_gib"] = gib(free)
    if tto is not None:
        evidence["time_to_oom_s"] = tto
    free_txt = f"; {gib(free):.1f} GiB free on {gpu}" if free is not None else ""
    return Condition(
        id="mem.growth", severity=severity, device=d.index,
        pid=p.pid if p is not None else None,
        title=f"{who} memory grows {slope / MiB:.0f} MiB/s{when}",
        cause=f"{gib(now_bytes):.1f} GiB now, +{gib(grown):.1f} GiB in the last {length:.0f} s "
              f"(straight-line fit, R² {r2:.2f}){free_txt}. Memory that grows every step is kept "
              "somewhere and never freed.",
        fix=GROWTH_FIX, evidence=evidence, score=slope)


def _soon(recent: Sequence[Snapshot], index: int, pid: int,
          free: float | None) -> tuple[float, float, float, float] | None:
    """(slope B/s, R², growth, seconds to out of memory) of a process (pid -1: the device)
    over `recent`, the last SOON_FIT_S, where steady growth fills the free memory within SOON_S
    (with the GPU computing; SOON_LOAD_S without)."""
    if free is None or len(recent) < SOON_MIN_POINTS:
        return None
    ts, vs = field_readings(recent, index, "mem_used") if pid < 0 else \
        readings(recent, _memory_at, index, pid)
    if len(ts) < SOON_MIN_POINTS or ts[-1] - ts[0] < MIN_COVER * SOON_FIT_S:
        return None
    if max(vs) - min(vs) < SOON_MIN_GROWTH:
        return None
    if sum(b > a for a, b in itertools.pairwise(vs)) < SOON_RISING * (len(vs) - 1):
        return None
    fit = least_squares(ts, vs)
    if fit is None:
        return None
    slope, r2 = fit
    grown = slope * (ts[-1] - ts[0])
    if r2 < MIN_R2 or grown < SOON_MIN_GROWTH or vs[-1] < max(vs):
        return None
    eta = max(free, 0.0) / slope
    busy = busy_mean(recent, index)[1]
    limit = SOON_S if busy is not None and busy >= COMPUTING else SOON_LOAD_S
    return (slope, r2, grown, eta) if eta <= limit else None


def _on_devices(now: Snapshot) -> dict[int, dict[int, ProcessSample]]:
    """GPU -> pid -> its process at this tick (the last entry of a pid listed twice)."""
    on: dict[int, dict[int, ProcessSample]] = {}
    for p in now.processes:
        on.setdefault(p.device_index, {})[p.pid] = p
    return on


def _whose(procs: dict[int, ProcessSample]) -> dict[int, ProcessSample | None]:
    """pid -> process of those on a GPU; {-1: None} where none reports its memory."""
    if not any(number(p.gpu_mem) is not None for p in procs.values()):
        return {-1: None}
    return dict(procs)


def check_oom_soon(window: Sequence[Snapshot]) -> list[Condition]:
    recent = last(window, SOON_FIT_S)
    if len(recent) < SOON_MIN_POINTS:
        return []
    now = recent[-1]
    on = _on_devices(now)
    out = []
    for index in devices(recent):
        d = device_at(now, index)
        free = _free(d) if d is not None else None
        if d is None or free is None:
            continue
        for pid, p in _whose(on.get(index, {})).items():
            got = _soon(recent, index, pid, free)
            if got is None:
                continue
            slope, r2, grown, eta = got
            gpu = f"GPU{index}"
            who = f"{gpu} PID {p.pid} `{command(p)}`" if p is not None else gpu
            now_bytes = number(p.gpu_mem) if p is not None else number(d.mem_used)
            out.append(Condition(
                id="mem.oom_soon", severity="critical" if eta < SOON_CRITICAL_S else "warning",
                device=index, pid=p.pid if p is not None else None,
                title=f"{who} memory grows {gib(slope):.2f} GiB/s: out of memory in "
                      f"~{_duration(eta)} at this rate",
                cause=f"+{gib(grown):.1f} GiB in the last {SOON_FIT_S:.0f} s (straight-line "
                      f"fit, R² {r2:.2f}), {gib(now_bytes or 0.0):.1f} GiB now and "
                      f"{gib(max(free or 0.0, 0.0)):.1f} GiB free on {gpu}: at this rate the "
                      "card is full before long. A load that stops short of it ends this.",
                fix=GROWTH_FIX, score=-eta,
                evidence={"rate_mib_s": slope / MiB, "r2": r2, "growth_gib": gib(grown),
                          "free_gib": gib(free or 0.0), "time_to_oom_s": eta}))
    return out


def check_pressure(window: Sequence[Snapshot]) -> list[Condition]:
    if not window:
        return []
    out = []
    newest = window[-1]
    for index in devices(window):
        d = device_at(newest, index)
        total = number(d.mem_total) if d is not None else None
        free = _free(d) if d is not None else None
        if d is None or not total or free is None:
            continue
        share = 1.0 - free / total
        used = field_values(window, index, "mem_used")
        if share < PRESSURE_SHARE or not used or max(used) - min(used) < PRESSURE_GROWTH:
            continue
        out.append(Condition(
            id="mem.pressure", severity="warning", device=index,
            title=f"GPU{index} memory {share * 100:.0f} % full ({gib(total - free):.1f} of "
                  f"{gib(total):.1f} GiB): the next larger allocation may fail",
            cause="Nearly all device memory is held; a larger batch, a longer sequence or "
                  "fragmentation will end in an out-of-memory error.",
            fix=PRESSURE_FIX, evidence={"used_share": share, "free_gib": gib(free)},
            score=share))
    return out


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


GROWTH = Diagnostic(name="mem.growth", check=check_growth, window_s=max(FIT_SPANS_S),
                    for_s=GROWTH_FOR_S, clear_s=GROWTH_CLEAR_S, reads_links=False)
OOM_SOON = Diagnostic(name="mem.oom_soon", check=check_oom_soon, window_s=SOON_FIT_S,
                      for_s=SOON_FOR_S, clear_s=SOON_CLEAR_S, every_s=0.0)
PRESSURE = Diagnostic(name="mem.pressure", check=check_pressure, window_s=PRESSURE_FOR_S,
                      for_s=PRESSURE_FOR_S)
