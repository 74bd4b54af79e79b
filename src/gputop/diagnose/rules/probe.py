"""What the in-process probe shows about memory and NVML cannot: R4 `mem.fragmentation` and
R7 `mem.headroom` (docs/diagnostics.md §4.3, §7.1, §8). The probe's loader wait (R2) is evidence of
`loader.starvation` and is read there, so one problem makes one finding.

Each reads `ProcessSample.probe`; a process without a probe gives no condition at all. The probe
publishes about once a second, so consecutive ticks may carry the same payload: the peaks are taken
as maxima over the window, the cumulative counters as their growth between the oldest and newest
payloads. A process that holds a context on two GPUs shows up twice with the same payload; it is
judged on its home GPU (`home_processes`), where its allocator works.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gputop.diagnose.types import Condition, Diagnostic
from gputop.diagnose.window import (
    busy_mean,
    column,
    command,
    device_at,
    gib,
    growth,
    last,
    median,
    number,
)
from gputop.model import ProbeStats, ProcessSample, Snapshot
from gputop.model.memory_split import home_processes

GiB = 1 << 30

# R4 mem.fragmentation
FRAG_WINDOW_S = 300.0
FRAG_FOR_S = 300.0
FRAG_RATIO = 0.20  # with pressure >= 0.5 (22 % measured at the OOM under the default allocator)
FRAG_PRESSURE = 0.5
FULL_FRAG_RATIO = 0.12  # with pressure >= 0.85: b = 150 sat at 94 % / 16 %, the next size OOM-ed
FULL_PRESSURE = 0.85
# Nearly full and fragmented is one step from an out-of-memory error (b = 150 fit, 170 did not):
# the probe measures it directly, so it is held 30 s (a few steps' peaks), not R4's 5 min.
FULL_FOR_S = 30.0
RETRY_CRITICAL_PRESSURE = 0.9  # a retry this close to full is an OOM about to happen
INFO_FRAG_BYTES = 2 * GiB  # shown, no action, below FRAG_PRESSURE

# R7 mem.headroom
HEADROOM_WINDOW_S = 300.0
HEADROOM_EVERY_S = 300.0  # recompute every 5 min
MIN_STEPS = 12  # >= 10 steps past the 2 warm-up steps the probe leaves out of its pairs
MARGIN = 0.10  # of device memory, kept free
MIN_PHI = 1.05  # allocator overhead never below this (1.07-1.19 measured)
UNKNOWN_PHI = 1.20
NONALLOC_GUESS = int(0.75 * GiB)  # CUDA context and friends when NVML gives no process memory
SAFETY = 0.9  # suggest at most 0.9 of the estimated maximum ...
ROUND_TO = 8  # ... rounded down to a multiple of 8
MIN_HEADROOM = 1.25  # below this there is nothing worth suggesting
BUSY_SATURATED = 90.0  # a saturated GPU gains little from a larger batch

EXPANDABLE = "expandable_segments:True"
FRAG_FIX = (f"Set PYTORCH_CUDA_ALLOC_CONF={EXPANDABLE} (measured: the same job then fit batch 185 "
            "instead of running out of memory at 170). Make shapes static (pad or bucket sequence "
            "lengths, drop_last=True). empty_cache() does not fix fragmentation.")
FRAG_FIX_EXPANDABLE = ("expandable_segments is already on. Make shapes static (pad or bucket "
                       "sequence lengths, drop_last=True); for many near-identical sizes try "
                       "roundup_power2_divisions; as a last resort set max_split_size_mb in "
                       "PYTORCH_CUDA_ALLOC_CONF. empty_cache() does not fix fragmentation.")
HEADROOM_FIX = ("Stay at or below the suggested batch and retune the learning rate for it; for "
                "more headroom use activation checkpointing, bf16 or 8-bit optimizer states, "
                f"ZeRO/FSDP, or PYTORCH_CUDA_ALLOC_CONF={EXPANDABLE}.")
HEADROOM_CAVEATS = ("An estimate: linear in batch at a fixed sequence length or resolution; "
                    "kernel choices, checkpointing, sharding and NCCL buffers can change it, and "
                    "eval steps have other profiles.")


# -- the probed processes ---------------------------------------------------------------------


def _payloads(window: Sequence[Snapshot], pid: int, index: int) -> list[ProbeStats]:
    """The distinct payloads of a process on one GPU over the window, oldest first."""
    out: list[ProbeStats] = []
    for probe in column(window, _payload, pid, index):
        if probe is not None and (not out or probe.ts > out[-1].ts):
            out.append(probe)
    return out


def _payload(s: Snapshot, pid: int, index: int) -> ProbeStats | None:
    for p in s.processes:
        if p.pid == pid and p.device_index == index and p.probe is not None:
            return p.probe
    return None


def _who(p: ProcessSample) -> str:
    name = command(p)
    return f"GPU{p.device_index} PID {p.pid}" + (f" `{name}`" if name != "?" else "")


def _peaks(payloads: Sequence[ProbeStats]) -> tuple[float, float] | None:
    """(allocated peak, reserved peak) over the payloads; None without allocator numbers."""
    alloc = [p.peak_allocated for p in payloads if p.peak_allocated is not None]
    res = [p.peak_reserved for p in payloads if p.peak_reserved is not None]
    if not alloc or not res or max(res) <= 0:  # cudaMallocAsync reports zeros
        return None
    return float(max(alloc)), float(max(res))


def _counter_growth(payloads: Sequence[ProbeStats], name: str) -> float:
    return growth([float(v) for p in payloads if (v := getattr(p, name)) is not None])


# -- R4 mem.fragmentation ---------------------------------------------------------------------


def check_fragmentation(window: Sequence[Snapshot]) -> list[Condition]:
    if not window:
        return []
    out = []
    for p in home_processes(window[-1]).values():
        d = device_at(window[-1], p.device_index)
        total = number(d.mem_total) if d is not None else None
        payloads = _payloads(window, p.pid, p.device_index)
        peaks = _peaks(payloads)
        if not total or peaks is None:
            continue
        alloc, res = peaks
        frag = max(res - alloc, 0.0)
        ratio = frag / res
        pressure = res / total
        retries = _counter_growth(payloads, "num_alloc_retries")
        ooms = _counter_growth(payloads, "num_ooms")
        severity, for_s = _frag_severity(ratio, pressure, frag, retries, ooms)
        if severity is None:
            continue
        conf = payloads[-1].allocator_conf or ""
        expandable = _expandable(conf)
        events = []
        if retries:
            events.append(f"{retries:.0f} allocator retries (each a full cache flush and sync)")
        if ooms:
            events.append(f"{ooms:.0f} out-of-memory errors")
        minutes = (window[-1].time - window[0].time) / 60
        tail = f"; {' and '.join(events)} in the last {minutes:.0f} min" if events else ""
        under = " under expandable_segments" if expandable else ""
        out.append(Condition(
            id="mem.fragmentation", severity=severity, device=p.device_index, pid=p.pid,
            title=f"{_who(p)}: {gib(frag):.1f} GiB ({ratio * 100:.0f} %) of the {gib(res):.1f} GiB "
                  f"reserved by PyTorch is cached but unallocated{tail}",
            cause=f"Peaks over the window: {gib(alloc):.1f} GiB allocated, {gib(res):.1f} GiB "
                  f"reserved{under} ({pressure * 100:.0f} % of the GPU). Memory the allocator "
                  "holds in pieces too small for the next request is lost to the job; when none "
                  "fits, PyTorch flushes its cache and retries, then runs out of memory.",
            fix=FRAG_FIX_EXPANDABLE if expandable else FRAG_FIX,
            evidence={"frag_gib": gib(frag), "frag_ratio": ratio, "pressure": pressure,
                      "reserved_peak_gib": gib(res), "allocated_peak_gib": gib(alloc),
                      "alloc_retries": retries, "ooms": ooms},
            for_s=for_s, score=ratio))
    return out


def _frag_severity(ratio: float, pressure: float, frag: float, retries: float,
                   ooms: float) -> tuple[str | None, float | None]:
    """(severity, `for` override): retries and OOMs fire at once, ratios after FRAG_FOR_S."""
    if ooms >= 1 or (retries >= 1 and pressure >= RETRY_CRITICAL_PRESSURE):
        return "critical", 0.0
    if retries >= 1:
        return "warning", 0.0
    if pressure >= FULL_PRESSURE and ratio >= FULL_FRAG_RATIO:
        return "warning", FULL_FOR_S
    if pressure >= FRAG_PRESSURE and ratio >= FRAG_RATIO:
        return "warning", None
    if frag >= INFO_FRAG_BYTES and pressure < FRAG_PRESSURE:
        return "info", None
    return None, None


def _expandable(conf: str) -> bool:
    """Whether PYTORCH_CUDA_ALLOC_CONF turns expandable segments on ("k:v,k:v")."""
    for item in conf.split(","):
        key, _, val = item.partition(":")
        if key.strip() == "expandable_segments" and val.strip().lower() in ("true", "1"):
            return True
    return False


# -- R7 mem.headroom --------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """The §7.1 batch-size estimate, in bytes and samples."""

    alpha: float  # bytes that do not grow with the batch
    beta: float  # bytes per sample
    fitted: bool  # a line through >= 2 batch sizes; else the single-batch upper bound on beta
    budget: float  # M
    phi: float
    b_max: int
    suggest: int


def fit_line(pairs: Sequence[tuple[int, int]]) -> tuple[float, float] | None:
    """(alpha, beta) of P(b) = alpha + beta * b, least squares on the median peak of each batch
    size; None with fewer than 2 distinct batch sizes."""
    by_b: dict[int, list[float]] = {}
    for b, peak in pairs:
        by_b.setdefault(b, []).append(float(peak))
    if len(by_b) < 2:
        return None
    pts = [(float(b), median(ps) or 0.0) for b, ps in by_b.items()]
    n = len(pts)
    mb = sum(b for b, _ in pts) / n
    mp = sum(p for _, p in pts) / n
    sbb = sum((b - mb) ** 2 for b, _ in pts)
    beta = sum((b - mb) * (p - mp) for b, p in pts) / sbb
    return mp - beta * mb, beta


def estimate(probe: ProbeStats, *, total: float, nonalloc: float, others: float,
             phi: float) -> Estimate | None:
    """The largest batch the budget allows, or None when the numbers do not give one."""
    pairs = probe.batch_sizes
    if not pairs:
        return None
    line = fit_line(pairs)
    fitted = line is not None
    if line is None:
        b, peak = pairs[-1]
        base = probe.allocated  # held between steps: weights, grads, optimizer states
        if base is None or base >= peak:
            return None
        line = (float(base), (peak - base) / b)
    alpha, beta = line
    if beta <= 0:
        return None
    budget = total - nonalloc - others - MARGIN * total
    b_max = math.floor((budget / phi - alpha) / beta)
    if b_max < 1:
        return None
    top = SAFETY * b_max
    suggest = int(top // ROUND_TO * ROUND_TO) if top >= ROUND_TO else max(1, math.floor(top))
    return Estimate(alpha, beta, fitted, budget, phi, b_max, suggest)


def check_headroom(window: Sequence[Snapshot]) -> list[Condition]:
    if not window:
        return []
    out = []
    now = window[-1]
    for p in home_processes(now).values():
        probe = p.probe
        d = device_at(now, p.device_index)
        total = number(d.mem_total) if d is not None else None
        if probe is None or not total or probe.steps < MIN_STEPS or not probe.batch_sizes:
            continue
        busy = busy_mean(last(window, 60.0), p.device_index)[1]
        if busy is not None and busy >= BUSY_SATURATED:
            continue
        payloads = _payloads(window, p.pid, p.device_index)
        peaks = _peaks(payloads)
        phi = max(peaks[1] / peaks[0], MIN_PHI) if peaks and peaks[0] > 0 else UNKNOWN_PHI
        gpu_mem = number(p.gpu_mem)
        reserved = probe.reserved if probe.reserved is not None else (
            peaks[1] if peaks else None)
        nonalloc = (max(gpu_mem - reserved, 0.0) if gpu_mem is not None and reserved is not None
                    else NONALLOC_GUESS)
        others = sum(number(q.gpu_mem) or 0.0 for q in now.processes_on(p.device_index)
                     if q.pid != p.pid)
        est = estimate(probe, total=total, nonalloc=nonalloc, others=others, phi=phi)
        current, peak = probe.batch_sizes[-1]
        if est is None or est.b_max < MIN_HEADROOM * current or est.suggest <= current:
            continue
        method = ("a line fitted to per-step peaks at "
                  f"{len({b for b, _ in probe.batch_sizes})} batch sizes" if est.fitted else
                  "one batch size (an upper bound on the memory per sample, so conservative)")
        out.append(Condition(
            id="mem.headroom", severity="info", device=p.device_index, pid=p.pid,
            title=f"{_who(p)}: peak {gib(peak):.1f} GiB at batch {current}; estimated max batch "
                  f"≈ {est.b_max} (x{est.b_max / current:.1f}) with {MARGIN * 100:.0f} % margin "
                  f"and {est.phi:.2f}x allocator overhead; try {est.suggest} (estimate)",
            cause=f"From {method}: {gib(est.alpha):.2f} GiB + {gib(est.beta):.3f} GiB per "
                  f"sample, against a budget of {gib(est.budget):.1f} GiB ({gib(total):.1f} GiB "
                  f"total, {gib(nonalloc):.2f} GiB outside the allocator, {gib(others):.1f} GiB "
                  f"held by other processes). {HEADROOM_CAVEATS}",
            fix=HEADROOM_FIX,
            evidence={"batch": float(current), "b_max": float(est.b_max),
                      "suggest": float(est.suggest), "alpha_gib": gib(est.alpha),
                      "beta_gib": gib(est.beta), "budget_gib": gib(est.budget), "phi": est.phi,
                      "headroom": est.b_max / current}))
    return out


FRAGMENTATION = Diagnostic(name="mem.fragmentation", check=check_fragmentation,
                           window_s=FRAG_WINDOW_S, for_s=FRAG_FOR_S)
HEADROOM = Diagnostic(name="mem.headroom", check=check_headroom, window_s=HEADROOM_WINDOW_S,
                      every_s=HEADROOM_EVERY_S)
