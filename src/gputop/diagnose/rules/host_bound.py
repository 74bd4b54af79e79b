"""`step.host_bound`: the GPU mostly waits while its own process's main thread is pegged.

A training loop whose host side cannot keep up: pageable host-to-device copies, `.item()` or
`.cpu()` synchronisations, Python overhead in small steps, or batches made in the main process
(num_workers=0). From outside it reads as NVML util well below busy with the process's main thread
at a full core and no DataLoader worker busy (docs/diagnostics.md §5.4: num_workers=0 ran at
17.7 % util with the main process at 268 %). A pure copy loop reads busy in NVML util while GPM's
graphics activity reads 0 (§0.1), so where the GPU has GPM the finding says the time goes to
copies.

The probe tells it from starvation: where it sees the loop wait on its DataLoader, that is
`loader.starvation`; where it sees no wait, the step itself is host-bound. Without the probe, a
main process that loads its own batches looks the same, so the fix names both. The process's GPU
memory does not matter: a host-bound step needs no large model.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputop.diagnose.rules.copy_bound import UTIL_BUSY
from gputop.diagnose.types import Condition, Diagnostic
from gputop.diagnose.window import (
    busy_mean,
    column,
    command,
    covers,
    device_at,
    devices,
    field_mean,
    field_values,
    last,
    mean,
    median,
    number,
    times,
)
from gputop.model import ProcessSample, Snapshot

ID = "step.host_bound"
# As loader.starvation's outside view (rules/starvation.py): a 20 s mean, held 10 s, shows it
# within 30 s; it ends 3 s after the last 8 s no longer look host-bound.
WINDOW_S = 20.0
RECENT_S = 8.0
FOR_S = 10.0
CLEAR_S = 3.0
# "Mostly idle": busy < 30 %. Measured host-bound loops ran at 17.7-21.9 % util (num_workers=0,
# a 10/40 ms step, §5.4); an eval pass or a slow but computing step stays above it.
IDLE_BUSY = 30.0
# The GPU runs something in most samples: a checkpoint save or start-up leaves it at 0 while the
# main thread serialises or compiles, and is no slow step.
WORKING_UTIL = 5.0
WORKING_SHARE = 0.5
MAIN_PEGGED = 90.0  # R1 class 2's "main process >= 90 %": a full core
LOADER_IDLE = 50.0  # workers below this are not what the loop waits on (R1 class 3)
WAIT_NONE = 0.05  # the probe's share of step time waiting on the loader: below it, no wait
MIN_AGE_S = 10.0  # a process's first seconds are its start-up
COPIES = 10.0  # NVML util this many points above GPM graphics activity: the GPU is copying
# NVML util this high lately with the engines idle: the copy engines are full and the main
# thread spins in a synchronize (a real H100 copying pinned memory, 100 % util, main thread at
# 100 %). That is gpu.copy_bound's; the GPU is not waiting on the host.
COPIES_FULL = UTIL_BUSY

FIX = ("Profile a few steps with torch.profiler: use pinned memory (pin_memory=True) and "
       ".to('cuda', non_blocking=True) for host-to-device copies, keep losses on the GPU instead "
       "of calling .item() or .cpu() every step, batch small operations (or torch.compile / CUDA "
       "graphs against Python overhead), and load batches in DataLoader workers (num_workers>0).")


def check(window: Sequence[Snapshot]) -> list[Condition]:
    recent = last(window, WINDOW_S)
    if not covers(recent, WINDOW_S):
        return []
    out = []
    newest = recent[-1]
    for index in devices(recent):
        d = device_at(newest, index)
        if d is None or d.mig_enabled is True:
            continue
        metric, busy = busy_mean(recent, index)
        if busy is None or busy >= IDLE_BUSY:
            continue
        lately = last(recent, RECENT_S)
        latest = busy_mean(lately, index)[1]
        if latest is not None and latest >= IDLE_BUSY:
            continue
        if metric == "gr_active" and (field_mean(lately, index, "util_gpu") or 0.0) >= COPIES_FULL:
            continue
        util = field_values(recent, index, "util_gpu")
        if not util or (mean(util) or 0.0) < WORKING_UTIL or \
                sum(v > 0 for v in util) < WORKING_SHARE * len(util):
            continue
        pegged = _pegged(recent, index)
        if pegged is None:
            continue
        proc, cpu = pegged
        gpu = f"GPU{index}"
        who = f"PID {proc.pid} `{command(proc)}`"
        nvml = mean(util) or 0.0
        copying = metric == "gr_active" and nvml - busy >= COPIES
        if copying:
            short = f"GPU copying (util {nvml:.0f} %, engine {busy:.0f} %)"
            what = (f"its time on the GPU is copies: NVML util {nvml:.0f} %, graphics engine "
                    f"{busy:.0f} %")
        else:
            short = what = f"GPU busy {busy:.0f} %"
        probe = proc.probe
        measured = probe is not None and probe.steps > 0
        tail = (" The probe sees no wait on the DataLoader: the step itself is host-bound."
                if measured else
                " With no DataLoader worker busy, the loop itself (or batches made in the main "
                "process, num_workers=0) holds the GPU up.")
        evidence = {"busy_pct": busy, "util_pct": nvml, "main_cpu_pct": cpu, "pid": proc.pid}
        if measured and probe is not None and probe.step_time_s is not None:
            evidence["step_time_s"] = probe.step_time_s
        out.append(Condition(
            id=ID, severity="warning", device=index, pid=proc.pid,
            title=f"{gpu} waits on the host: {who} main thread at {cpu:.0f} % CPU, {short}",
            cause=f"{gpu}: {what} over the last {WINDOW_S:.0f} s while {who}'s main thread runs "
                  f"at {cpu:.0f} % of a core: the GPU waits for the host to issue work (pageable "
                  "copies, .item()/sync, Python overhead)." + tail,
            fix=FIX, evidence=evidence, score=cpu - busy))
    return out


def _pegged(window: Sequence[Snapshot], index: int) -> tuple[ProcessSample, float] | None:
    """The process on the GPU whose main thread is pegged over the window, with no DataLoader
    worker busy and no loader wait seen by its probe; the busiest such, with its median CPU %."""
    now = window[-1].time
    best: tuple[ProcessSample, float] | None = None
    ts = times(window)
    ticks = column(window, _on_gpu, index)
    lately = now - RECENT_S
    for p in window[-1].processes_on(index):
        hist = [on[p.pid] for _, on in zip(ts, ticks) if p.pid in on]
        cpu = median([c for c, _ in hist if c is not None])
        # The workers as they are now: a loader that was busy before the slowdown is no cause.
        workers = median([on[p.pid][1] for t, on in zip(ts, ticks)
                          if t >= lately and p.pid in on and on[p.pid][1] is not None])
        if cpu is None or cpu < MAIN_PEGGED or (workers is not None and workers >= LOADER_IDLE):
            continue
        born = number(p.create_time)
        if born is None:
            born = next(t for t, on in zip(ts, ticks) if p.pid in on)
        if now - born < MIN_AGE_S:
            continue
        probe = p.probe
        if probe is not None and probe.steps > 0:
            share = probe.recent_wait_frac if probe.recent_wait_frac is not None \
                else probe.wait_frac
            if share is not None and share > WAIT_NONE:
                continue  # the loop waits on its loader: loader.starvation says so
        if best is None or cpu > best[1]:
            best = (p, cpu)
    return best


def _on_gpu(s: Snapshot, index: int) -> dict[int, tuple[float | None, float | None]]:
    """pid -> (main process CPU %, median worker CPU % or None without workers) at a tick."""
    out: dict[int, tuple[float | None, float | None]] = {}
    for p in s.processes_on(index):
        if p.pid not in out:
            out[p.pid] = (number(p.cpu_percent),
                          median([c.cpu_percent for c in p.children]))
    return out


HOST_BOUND = Diagnostic(name="host_bound", check=check, window_s=WINDOW_S, for_s=FOR_S,
                        clear_s=CLEAR_S, every_s=0.0)
