"""`job.straggler`: one GPU of a synchronous multi-GPU job runs slower than its peers.

In data-parallel and FSDP training every step waits for the slowest rank, so one slow GPU slows the
whole job, and its peers show the cost as time waiting in NCCL. The ranks of a job are the
processes of one Slurm job or pod, or with the same command line except the rank argument. The
slow GPU is the one whose SM clock or busy share is markedly below the median of its peers; the
clock-event counters, temperatures and power limits say why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from gputop.diagnose.types import Condition, Diagnostic
from gputop.diagnose.window import (
    busy_mean,
    device_at,
    field_mean,
    last,
    median,
    number,
    reason_share,
)
from gputop.model import Missing, ProcessSample, Snapshot

WINDOW_S = 30.0
FOR_S = 30.0
MIN_RANKS = 3  # a median of peers needs two of them; with two GPUs neither is "the" odd one
ACTIVE_BUSY = 50.0  # the job is running: median busy of its GPUs
# Under the power cap an H100's clock spreads ±6 % around its median (1350-1515 MHz, 10th-90th
# percentile, docs/diagnostics.md §0.3); a gap of 15 % is beyond that spread.
CLOCK_GAP = 0.15
# A rank that waits for its own input has no kernels queued, while its peers spin in NCCL kernels
# that count as busy; a faster rank spinning for the others reads only a few points lower.
BUSY_GAP = 15.0
THERMAL_SHARE = 0.05  # R5: SW thermal time > 5 % of the window is throttling
MARGIN_HOT = 3.0  # R5
LIMIT_TOLERANCE_W = 1.0

_RANK_ARG = re.compile(r"^--?(?:local[_-]?)?rank(?:=\d+)?$", re.IGNORECASE)


def _job_key(p: ProcessSample) -> tuple[str, ...] | None:
    if p.job is not None and p.job.slurm_job_id:
        return ("slurm", p.job.slurm_job_id)
    if p.job is not None and p.job.pod_uid:
        return ("pod", p.job.pod_uid)
    if isinstance(p.cmdline, Missing) or not p.cmdline:
        return None
    args: list[str] = []
    skip = False
    for a in p.cmdline:
        if skip:
            skip = False
            continue
        if _RANK_ARG.match(a):
            skip = "=" not in a  # "--rank 3": drop the value too
            continue
        args.append(a)
    user = p.user if isinstance(p.user, str) else ""
    return ("cmd", user, *args)


def _job_label(key: tuple[str, ...]) -> str:
    if key[0] == "slurm":
        return f"Slurm job {key[1]}"
    if key[0] == "pod":
        return f"pod {key[1][:8]}"
    return "its job"


def _jobs(snap: Snapshot) -> dict[tuple[str, ...], dict[int, ProcessSample]]:
    jobs: dict[tuple[str, ...], dict[int, ProcessSample]] = {}
    for p in snap.processes:
        key = _job_key(p)
        if key is not None:
            jobs.setdefault(key, {}).setdefault(p.device_index, p)
    return jobs


class _Rank(NamedTuple):
    """One GPU of the job over the window."""

    clock: float  # mean SM clock, MHz
    busy: float  # mean busy %, GPM graphics activity or NVML util
    temp: float | None


def check(window: Sequence[Snapshot]) -> list[Condition]:
    recent = last(window, WINDOW_S)
    if not recent:
        return []
    out = []
    for key, procs in _jobs(recent[-1]).items():
        if len(procs) < MIN_RANKS:
            continue
        ranks = {i: _rank(recent, i) for i in procs}
        known = {i: r for i, r in ranks.items() if r is not None}
        if len(known) < len(ranks):
            continue
        job_busy = median([r.busy for r in known.values()])
        if job_busy is None or job_busy < ACTIVE_BUSY:
            continue
        for index, proc in procs.items():
            c = _straggler(recent, key, index, proc, known)
            if c is not None:
                out.append(c)
    return out


def _rank(window: Sequence[Snapshot], index: int) -> _Rank | None:
    clock = field_mean(window, index, "clock_sm")
    busy = busy_mean(window, index)[1]
    if clock is None or busy is None:
        return None
    return _Rank(clock, busy, field_mean(window, index, "temp_gpu"))


def _straggler(window: Sequence[Snapshot], key: tuple[str, ...], index: int,
               proc: ProcessSample, ranks: dict[int, _Rank]) -> Condition | None:
    me = ranks[index]
    peers = [r for i, r in ranks.items() if i != index]
    p_clock = median([r.clock for r in peers]) or 0.0
    p_busy = median([r.busy for r in peers]) or 0.0
    slow_clock = me.clock <= (1.0 - CLOCK_GAP) * p_clock
    slow_busy = me.busy <= p_busy - BUSY_GAP
    if not (slow_clock or slow_busy):
        return None
    p_temp = median([r.temp for r in peers if r.temp is not None])
    why, fix = _why(window, index, list(ranks), slow_clock, me.temp, p_temp)
    gpu = f"GPU{index}"
    n = len(peers)
    if slow_clock:
        what = f"SM clock {me.clock:.0f} vs {p_clock:.0f} MHz on its {n} peers"
    else:
        what = f"busy {me.busy:.0f} % vs {p_busy:.0f} % on its {n} peers"
    evidence = {"clock_mhz": me.clock, "peer_clock_mhz": p_clock, "busy_pct": me.busy,
                "peer_busy_pct": p_busy, "peers": n}
    if me.temp is not None and p_temp is not None:
        evidence |= {"temp_c": me.temp, "peer_temp_c": p_temp}
    return Condition(
        id="job.straggler", severity="warning", device=index, pid=proc.pid,
        title=f"{gpu} is the straggler of {_job_label(key)}: {what} ({why})",
        cause=f"In a synchronous job every step waits for the slowest rank: the other {n} GPUs "
              f"wait for {gpu} (PID {proc.pid}) at each collective, so the whole job runs at "
              f"{gpu}'s pace.",
        fix=fix, evidence=evidence, score=1.0 - me.clock / p_clock if p_clock else 0.0)


def _why(window: Sequence[Snapshot], index: int, job: list[int], slow_clock: bool,
         temp: float | None, p_temp: float | None) -> tuple[str, str]:
    """(why, fix): heat, a lower power limit, the power brake, an unnamed clock cap, or input."""
    d = device_at(window[-1], index)
    thermal = sum(reason_share(window, index, r) or 0.0 for r in ("sw_thermal", "hw_thermal"))
    margin = number(d.temp_margin) if d is not None else None
    if thermal > THERMAL_SHARE or (margin is not None and margin <= MARGIN_HOT):
        temps = (f", {temp:.0f} °C vs {p_temp:.0f} °C"
                 if temp is not None and p_temp is not None else "")
        return (f"thermal slowdown{temps}",
                "Cool this GPU: check its airflow, fans and inlet temperature, and open a "
                "hardware ticket if it persists.")
    limit = number(d.power_limit) if d is not None else None
    p_limit = median([v for i in job if i != index
                      and (x := device_at(window[-1], i)) is not None
                      and (v := number(x.power_limit)) is not None])
    if limit is not None and p_limit is not None and limit < p_limit - LIMIT_TOLERANCE_W:
        return (f"power limit {limit:.0f} W vs {p_limit:.0f} W",
                "Restore this GPU's power limit (nvidia-smi -pl, as root) to match its peers.")
    if (reason_share(window, index, "hw_power_brake") or 0.0) > 0:
        return ("HW power brake", "Check the node's power delivery and the BMC event log.")
    if slow_clock:
        return ("no clock-event reason named",
                "Check for locked or application clocks (nvidia-smi -q -d CLOCK) and compare the "
                "GPU's settings with its peers'.")
    return ("its own input or host side is slower",
            "Check this rank's DataLoader and CPU affinity (its NUMA node), and whether other "
            "processes compete for its cores.")


STRAGGLER = Diagnostic(name="straggler", check=check, window_s=WINDOW_S, for_s=FOR_S)
