"""`loader.starvation`: the GPU waits for its input, seen from outside and from inside the job.

Outside (docs/diagnostics.md §5.1, §8 R1): NVML or GPM say the GPU is mostly idle, and the host says
why. Measured on an H100: NVML util is about 1 minus the loader's wait fraction, and "low busy with
every DataLoader worker at 100 % CPU" is the signature of a CPU-bound input pipeline (§5.4). The
workers, main process, I/O pressure and host CPU are read at the ticks where the GPU was starved, so
the class describes the stall itself and not the healthy ticks around it.

Inside (§5.2, §8 R2): the in-process probe measures the share of each step the training loop spends
blocked on its DataLoader, over its last 50 steps and (since the probe publishes it) over its last
few. The view holds while both are above 5 %: the 50-step share gives the severity and the title,
the recent one ends the view within seconds of the loader catching up, where the 50-step average
would trail by up to 50 steps. Then the outside view of that process lets go too: the GPU's low
20 s are the tail of the stall the probe saw end.

The probe is the stronger evidence, so where a process has both views they make one finding that
leads with the probe's share and takes its cause from the host. Either view alone still makes the
finding: a loop that waits while its workers idle (network storage), or a job without the probe.
The engine tracks the two views of a process as one condition, so the finding starts when the
first of them did and opens after the shorter hold of the views holding now.

How long a view holds before it is shown follows the strength of its evidence: 5 s for the
probe's direct measurement of half of each step or more spent waiting, 1 min for a smaller share,
10 s for the outside view where the host names the cause, 2 min where it does not (the constants
below say why). A GPU mostly idle with no worker and the main thread pegged is a host-bound step
(rules/host_bound.py) unless the probe saw the loop wait on its loader.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from gputop.diagnose.rules.host_bound import IDLE_BUSY as HOST_BOUND_BUSY
from gputop.diagnose.types import SEVERITIES, Condition, Diagnostic
from gputop.diagnose.window import (
    busy_mean,
    column,
    command,
    covers,
    device_at,
    devices,
    field_mean,
    field_values,
    gib,
    last,
    mean,
    median,
    number,
    reason_share,
    series,
    times,
)
from gputop.model import LinkSample, ProcessSample, Snapshot
from gputop.model.memory_split import home_processes

ID = "loader.starvation"
# The strength of the evidence sets the hold (how long a view must hold before it is shown).
# Outside, NVML util is about 1 minus the loader's wait fraction (docs/diagnostics.md §5.4, within
# ~7 points in all 9 measured runs), so a 20 s mean reads a stall as well as R1's minute did: 20 s
# is 40 samples at 2 Hz, and enough to average a 300/700 ms sawtooth (sd 45) to within ~10 points.
WINDOW_S = 20.0
RECENT_S = 8.0  # the view lets go once the last 8 s look healthy again ...
RECOVERED_BUSY = 80.0  # ... at >= 80 % busy: a healthy step runs at 91-94 % (§5.4), while a
# starved sawtooth (37 % mean, sd 45) reaches an 8 s mean of 80 % in well under 1 % of windows
# Held 10 s where the host names the cause (every DataLoader worker pegged, or I/O pressure): the
# 20 s mean plus this hold shows a stall within 30 s of its start, and a checkpoint or eval pause
# does not peg the training loader's workers, so the short hold does not flag them.
FOR_S = 10.0
# Where the host names no cause (a host-side stall, collectives), R1's 2 min: an eval or
# checkpoint phase, or a small model that cannot fill the GPU, looks the same from outside.
WEAK_FOR_S = 120.0
# A finding ends 3 s after the view lets go (the probe's recent share, or the last 8 s healthy):
# with the 8 s look-back that closes it within 10 s of the loader catching up.
CLEAR_S = 3.0
CRITICAL_WINDOW_S = 300.0  # R1: critical if busy < 30 % for 5 min
LOW_BUSY = 70.0  # R1: mean(busy) < 70 %
CRITICAL_BUSY = 30.0
# The GPU runs steps between the waits: NVML util (copies included) averages >= 5 % over the
# window, and is above 0 at some sample of the last RECENT_S. A checkpoint pause or the start-up
# (loading weights, compiling) leaves it at 0, but for the copies that start a checkpoint: a
# burst the 20 s mean keeps, while the host's I/O pressure from the write would name a cause.
WORKING_UTIL = 5.0
# Where GPM is read (Hopper and later), its graphics activity is the exact share of time kernels
# ran, where NVML util is a 1/6 s sample that a few ms of kernels a step can miss for many seconds:
# a real H200 loop starved to 99 % waiting ran at 1.4 % GPM activity with NVML util at 0 for 20 s
# and more (fixtures/nvidia/h200-train/starved). Copies do not count in it, so a checkpoint's
# copies or a pause leave it at 0 as before.
WORKING_GPM = 0.5
MIN_GPU_MEM = 1 << 30  # R1 applies to a process holding >= 1 GiB ...
# ... past its first 10 s: R1's 60 s kept start-up out, which WORKING_UTIL now does, and a run
# starved from its first step must not wait a minute to be named.
MIN_AGE_S = 10.0
IDLE_SAMPLE = 10.0  # R1: bursty when >= 20 % of util samples are < 10 %
BURSTY_SHARE = 0.20
WORKER_PEGGED = 85.0  # R1 class 1: median worker CPU >= 85 % of a core
MAIN_PEGGED = 90.0  # R1 class 2: no workers and main process >= 90 %
# A loop waiting on the GPU spins one core in its synchronize; a main process past two cores is
# doing host work itself, so with no workers the host names the cause. A real H100 loop making its
# batches in the process (num_workers=0, torch's threads augmenting) ran at 1570 % CPU with the
# GPU 44 % busy (fixtures/nvidia/h100-train/host_bound).
MAIN_LOADING = 200.0
LOADER_IDLE = 50.0  # R1 class 3: median worker CPU < 50 % ...
IO_PRESSURE = 10.0  # ... and PSI io some avg10 >= 10 % or iowait >= 10 %
HOST_CORE_BUSY = 90.0  # R1 class 4: host CPU >= 90 % on all cores
# "Not explained by throttling": clocks held by a thermal or power-delivery reason for more than the
# share R5 calls soft throttling (SW thermal counter > 5 % of wall time).
THROTTLE_EXPLAINS = 0.05
SLOWDOWN_REASONS = ("sw_thermal", "hw_thermal", "hw_power_brake", "hw_slowdown")
# R1 guard: a job waiting on NCCL moves data over NVLink while its SMs idle. Half the links'
# nominal bandwidth is an initial guess, to tune on fleet data.
COMM_LINK_SHARE = 0.5

# R2, the probe's share of step time blocked in next() on the DataLoader. A direct measurement:
# at >= 50 % over the probe's recent share (>= 5 steps and >= 5 s by its construction) it is
# shown after 5 s, within 10 s of the probe's first such reading; a smaller share keeps R2's
# minute, since a few slow batches (a shard boundary, a cold cache, an epoch's new workers) raise
# it for a while in healthy runs too.
WAIT_FOR_S = 60.0
STRONG_WAIT = 0.50
STRONG_WAIT_FOR_S = 5.0
STRONG_MIN_STEPS = 5
STRONG_MIN_S = 5.0
WAIT_INFO = 0.05  # torch_tb_profiler's "high time cost on input data loading" threshold
WAIT_WARNING = 0.20
WAIT_CRITICAL = 0.50
WAIT_STEPS = 50  # the probe's wait_frac covers its last 50 steps
# Classes the host names with its own numbers (pegged workers, I/O pressure, busy cores).
NAMED = ("cpu_loader", "io_bound", "oversubscribed")

FIX = {
    "cpu_loader": "Raise DataLoader num_workers (up to the free cores), use "
                  "persistent_workers=True and a larger prefetch_factor, cache decoded samples, "
                  "or move augmentation to the GPU (DALI, torchvision v2 transforms on GPU).",
    "no_workers": "Set DataLoader num_workers>0 and pin_memory=True.",
    "io_bound": "Stage the data on local NVMe, use sharded sequential formats (WebDataset, "
                "TFRecord) and more read-ahead.",
    "oversubscribed": "Reduce DataLoader workers or intra-op threads (OMP_NUM_THREADS), and check "
                      "for other jobs on the node.",
    "communication": "Check the collective pattern with torch.profiler or NCCL_DEBUG=INFO; overlap "
                     "communication with compute (bucketed all-reduce, FSDP prefetch).",
    "host_stall": "Profile with torch.profiler and HTA (host wait); look for .item()/.cpu() syncs, "
                  "logging or checkpoint stalls.",
    "slow_source": "Stage the data on local NVMe or cache it; raise num_workers and "
                   "prefetch_factor so more reads are in flight while each waits; use sharded "
                   "sequential formats (WebDataset, TFRecord).",
}


@dataclass(frozen=True)
class _Stall:
    """What the host side did while the GPU was starved."""

    workers: int
    worker_cpu: float | None  # median of the per-tick median worker CPU %
    main_cpu: float | None
    io: float | None  # the larger of PSI io and iowait, %
    least_busy_core: float | None
    link_share: float | None  # looked up only when the class depends on it (see `_classify`)


class _Outside(NamedTuple):
    """What NVML and the host say about a GPU's main process while the GPU was starved."""

    metric: str  # gr_active | util_gpu
    busy: float  # mean over the last WINDOW_S, %
    proc: ProcessSample  # its newest entry
    stall: _Stall
    starved: set[float]  # the ticks the GPU was starved


class _Wait(NamedTuple):
    """What the probe in a process measured."""

    proc: ProcessSample  # its newest entry, on its home GPU
    frac: float  # share of step time blocked in next()
    step_s: float
    steps: int  # how many steps the share covers
    strong: bool  # the recent share is >= STRONG_WAIT over >= 5 steps and 5 s


def check(window: Sequence[Snapshot]) -> list[Condition]:
    if not window:
        return []
    waits, caught_up = _inside(window)
    # Where the probe says the loop waited and no longer does, the GPU's low minute is the tail
    # of that stall, already over: the outside view does not hold it open.
    # Nor where the GPU is mostly idle, no worker loads data and the main thread is pegged,
    # unless the probe saw the loop wait on its loader: from outside that is a host-bound step
    # (rules/host_bound.py), which may or may not be loading data.
    seen = {k: v for k, v in _outside(window).items()
            if k not in caught_up and (k in waits or not _host_bound(v))}
    return [_condition(window, index, seen.get((index, pid)), waits.get((index, pid)))
            for index, pid in dict.fromkeys([*seen, *waits])]


def _outside(window: Sequence[Snapshot]) -> dict[tuple[int, int], _Outside]:
    """(GPU, pid) -> the outside view, for each GPU starved with a main process."""
    recent = last(window, WINDOW_S)
    if not covers(recent, WINDOW_S):
        return {}
    out = {}
    newest = window[-1]
    for index in devices(window):
        d = device_at(newest, index)
        if d is None or d.mig_enabled is True:
            continue
        metric, busy = busy_mean(recent, index)
        if busy is None or busy >= LOW_BUSY or _throttled(recent, index):
            continue
        latest = busy_mean(last(recent, RECENT_S), index)[1]
        if latest is not None and latest >= RECOVERED_BUSY:
            continue  # caught up: the 20 s mean still holds the stall's tail
        if not _working(recent, index, metric):
            continue  # no steps at all: a pause or start-up, not a stall between steps
        history = _main_process(window, index)
        if history is None:
            continue
        starved = {t for t, v in series(recent, index, metric) if v < LOW_BUSY}
        at = [(t, p) for t, p in history if t in starved]
        proc = history[-1][1].sample
        out[(index, proc.pid)] = _Outside(metric, busy, proc, _stall(recent, at), starved)
    return out


def _working(recent: Sequence[Snapshot], index: int, metric: str) -> bool:
    """Whether the GPU ran kernels between the waits: over the window and at some sample of the
    last RECENT_S, by GPM where it is read, else by NVML util."""
    lately = last(recent, RECENT_S)
    if metric == "gr_active":
        gr = field_mean(recent, index, "gr_active") or 0.0
        if gr >= WORKING_GPM and any(v > 0 for v in field_values(lately, index, "gr_active")):
            return True
    return ((field_mean(recent, index, "util_gpu") or 0.0) >= WORKING_UTIL
            and any(v > 0 for v in field_values(lately, index, "util_gpu")))


def _inside(window: Sequence[Snapshot]) -> tuple[dict[tuple[int, int], _Wait],
                                                  set[tuple[int, int]]]:
    """(home GPU, pid) -> the probe's view, for each process whose loop waits on its loader; and
    the processes whose loop waited over its last 50 steps but not over its last few (a probe
    older than the recent share never says so)."""
    now = window[-1]
    out = {}
    caught_up = set()
    for p in home_processes(now).values():
        probe = p.probe
        assert probe is not None
        frac, step, latest = probe.wait_frac, probe.step_time_s, probe.recent_wait_frac
        if (frac is None or step is None or probe.steps == 0 or frac <= WAIT_INFO
                or device_at(now, p.device_index) is None):
            continue
        key = (p.device_index, p.pid)
        # The 50-step share trails a stall's end by up to 50 steps; the share over the last few
        # lets the view go within seconds of the loader catching up.
        if latest is not None and latest <= WAIT_INFO:
            caught_up.add(key)
            continue
        recent = latest if latest is not None else frac
        covered = probe.steps >= STRONG_MIN_STEPS and (
            latest is not None or probe.steps * step >= STRONG_MIN_S)
        out[key] = _Wait(p, frac, step, min(probe.steps, WAIT_STEPS),
                         covered and recent >= STRONG_WAIT)
    return out, caught_up


def _throttled(window: Sequence[Snapshot], index: int) -> bool:
    shares = [reason_share(window, index, r) for r in SLOWDOWN_REASONS]
    return sum(s for s in shares if s is not None) > THROTTLE_EXPLAINS


class _Proc(NamedTuple):
    """A process on the GPU at one tick, as this rule reads it."""

    sample: ProcessSample
    sm: float | None  # SM utilization, %
    workers: int  # DataLoader workers
    worker_cpu: float | None  # their median CPU %
    main_cpu: float | None


def _on_gpu(s: Snapshot, index: int) -> dict[int, _Proc]:
    """pid -> the process on the GPU at this tick (its first entry), in the tick's order."""
    out: dict[int, _Proc] = {}
    for p in s.processes_on(index):
        if p.pid not in out:
            out[p.pid] = _Proc(p, number(p.sm_util), len(p.children),
                               median([c.cpu_percent for c in p.children]),
                               number(p.cpu_percent))
    return out


def _main_process(window: Sequence[Snapshot], index: int) -> list[tuple[float, _Proc]] | None:
    """The process the GPU works for: on it now with >= 1 GiB for >= 60 s, and running kernels
    if NVML says (an idle notebook holding memory on the same GPU is not the one starved).
    Its ticks over the last minute."""
    now = window[-1].time
    recent = last(window, WINDOW_S)
    ts, ticks = times(recent), column(recent, _on_gpu, index)
    best: tuple[float, float] | None = None
    chosen = None
    for pid in _by_first_seen(ticks, ticks[-1]):
        hist = [(t, on[pid]) for t, on in zip(ts, ticks) if pid in on]
        p = hist[-1][1].sample
        mem = number(p.gpu_mem)
        if mem is None or mem < MIN_GPU_MEM:
            continue
        born = number(p.create_time)
        if now - (born if born is not None else _first_seen(window, index, pid)) < MIN_AGE_S:
            continue
        sm = [q.sm for _, q in hist if q.sm is not None]
        if sm and max(sm) <= 0:
            continue
        rank = (mean(sm) or 0.0, mem)
        if best is None or rank > best:  # a tie goes to the one seen first
            best, chosen = rank, hist
    return chosen


def _by_first_seen(ticks: list[dict[int, _Proc]], pids: Iterable[int]) -> list[int]:
    """`pids` in the order they first appear over the ticks."""
    def first(pid: int) -> tuple[int, int]:
        i = next(i for i, on in enumerate(ticks) if pid in on)
        return i, list(ticks[i]).index(pid)
    return sorted(pids, key=first)


def _first_seen(window: Sequence[Snapshot], index: int, pid: int) -> float:
    """Where the process start time is unknown (another PID namespace), its first tick here."""
    return next(s.time for s in window if any(p.pid == pid for p in s.processes_on(index)))


def _stall(window: Sequence[Snapshot], at: list[tuple[float, _Proc]]) -> _Stall:
    when = {t for t, _ in at}
    ts = times(window)
    io = [v for t, v in zip(ts, column(window, _io)) if v is not None and t in when]
    cores = [v for t, v in zip(ts, column(window, _least_busy_core))
             if v is not None and t in when]
    return _Stall(
        workers=max((q.workers for _, q in at), default=0),
        worker_cpu=median([q.worker_cpu for _, q in at if q.worker_cpu is not None]),
        main_cpu=median([q.main_cpu for _, q in at if q.main_cpu is not None]),
        io=median(io),
        least_busy_core=median(cores),
        link_share=None,
    )


def _io(s: Snapshot) -> float | None:
    """The larger of PSI io and iowait, %."""
    return max((v for v in (number(s.host.psi_io_some), number(s.host.iowait_percent))
                if v is not None), default=None)


def _least_busy_core(s: Snapshot) -> float | None:
    cores = s.host.cpu_percent_per_core
    return min(cores) if cores else number(s.host.cpu_percent)


def _link_share(window: Sequence[Snapshot], index: int, at: set[float]) -> float:
    """Mean share of nominal NVLink bandwidth the device's up links carried at the given ticks."""
    total = count = 0.0
    for t, shares in zip(times(window), column(window, _link_shares), strict=True):
        if t in at:
            tick_total, tick_count = shares.get(index, _NO_SHARE)
            total += tick_total
            count += tick_count
    return total / count if count else 0.0


_NO_SHARE = (0.0, 0)


def _link_shares(s: Snapshot) -> dict[int, tuple[float, int]]:
    """Of each device, the sum and number of the shares of nominal bandwidth its up links
    carried at this tick: read once a tick, in one pass over its links (a node has over a
    hundred), not at every check nor once per device. A live source hands the same links
    again until it reads them anew (every 5 s): then the last tick's sums are this one's."""
    links, shares = _LAST_SHARES[0]  # one read: another thread may replace it meanwhile
    if len(links) == len(s.links) and all(map(operator.is_, links, s.links)):
        return shares
    shares = _sum_shares(s.links)
    _LAST_SHARES[0] = (s.links, shares)
    return shares


# The links `_link_shares` last summed, and their sums (read, never changed, by its callers).
_LAST_SHARES: list[tuple[Sequence[LinkSample], dict[int, tuple[float, int]]]] = [((), {})]


def _sum_shares(links: Sequence[LinkSample]) -> dict[int, tuple[float, int]]:
    sums: dict[int, list[float]] = {}
    for lk in links:
        if lk.up is not True:
            continue
        speed, rx, tx = number(lk.speed), number(lk.rx), number(lk.tx)
        if speed and rx is not None and tx is not None:
            got = sums.get(lk.device_index)
            if got is None:
                got = sums[lk.device_index] = [0.0, 0]
            got[0] += (rx + tx) / (2 * speed)
            got[1] += 1
    return {index: (total, int(count)) for index, (total, count) in sums.items()}


def _host_bound(seen: _Outside) -> bool:
    st = seen.stall
    return (seen.busy < HOST_BOUND_BUSY and not st.workers and st.main_cpu is not None
            and st.main_cpu >= MAIN_PEGGED)


def _classify(st: _Stall, *, data_wait: bool) -> str | None:
    """R1's classes, first match; None when the answer depends on the links not yet summed.
    Where the probe saw the loop wait on its loader (`data_wait`) the wait is for data, not for
    collectives, and a loader the host shows idle waits on a source that shows no I/O wait."""
    if st.workers and st.worker_cpu is not None and st.worker_cpu >= WORKER_PEGGED:
        return "cpu_loader"
    if not st.workers and st.main_cpu is not None and st.main_cpu >= MAIN_PEGGED:
        return "no_workers"
    loader = st.worker_cpu if st.workers else st.main_cpu
    if (loader is not None and loader < LOADER_IDLE
            and st.io is not None and st.io >= IO_PRESSURE):
        return "io_bound"
    busy_host = st.least_busy_core is not None and st.least_busy_core >= HOST_CORE_BUSY
    if data_wait:
        return "oversubscribed" if busy_host else "slow_source"
    if st.link_share is None:
        return None
    if st.link_share >= COMM_LINK_SHARE:
        return "communication"
    return "oversubscribed" if busy_host else "host_stall"


def _condition(window: Sequence[Snapshot], index: int, seen: _Outside | None,
               wait: _Wait | None) -> Condition:
    """One process on one GPU, from the views that hold (at least one)."""
    recent = last(window, WINDOW_S)
    if seen is not None:
        proc, st = seen.proc, seen.stall
    else:
        assert wait is not None
        # No starved ticks to read the host at: the last few seconds, which the probe's recent
        # share covers.
        proc = wait.proc
        lately = last(window, RECENT_S)
        st = _stall(lately, [(t, on[proc.pid]) for t, on in
                             zip(times(lately), column(lately, _on_gpu, index))
                             if proc.pid in on])
    kind = _classify(st, data_wait=wait is not None)
    if kind is None:  # the only class that needs the links, which are costly to sum
        assert seen is not None
        st = replace(st, link_share=_link_share(recent, index, seen.starved))
        kind = _classify(st, data_wait=False) or "host_stall"
    # The stronger view sets the hold: the probe's direct measurement, or the host's named cause.
    holds = []
    if wait is not None:
        holds.append(STRONG_WAIT_FOR_S if wait.strong else WAIT_FOR_S)
    if seen is not None:
        named = kind in NAMED or (kind == "no_workers" and (st.main_cpu or 0.0) >= MAIN_LOADING)
        holds.append(FOR_S if named else WEAK_FOR_S)
    for_s = min(holds)
    who = f"PID {proc.pid} {_quote(command(proc))}"
    gpu = f"GPU{index}"
    evidence: dict[str, float] = {}
    severities = []
    sentences = []
    if wait is not None:  # measured: it leads
        waiting = wait.frac * wait.step_s
        severities.append("critical" if wait.frac > WAIT_CRITICAL else
                          "warning" if wait.frac > WAIT_WARNING else "info")
        sentences.append(
            f"Measured in the process by gputop.probe: {wait.frac * 100:.1f} % of step time is "
            f"spent waiting for the DataLoader (last {wait.steps} steps, "
            f"{wait.step_s * 1000:.0f} ms step, {waiting * 1000:.0f} ms waiting).")
        evidence |= {"wait_frac": wait.frac, "step_time_s": wait.step_s,
                     "loader_wait_s": waiting, "steps": float(wait.steps)}
    if seen is not None:
        util = field_values(recent, index, "util_gpu")
        idle = sum(v < IDLE_SAMPLE for v in util) / len(util) if util else 0.0
        bursty = idle >= BURSTY_SHARE
        busy_txt = f"{gpu} busy {seen.busy:.0f} % ({_metric_name(seen.metric)}"
        busy_txt += f"; bursty: {idle * 100:.0f} % of samples idle)" if bursty else ")"
        sentences.append(f"{busy_txt} over the last {WINDOW_S:.0f} s.")
        severities.append(_outside_severity(window, index, kind, st, bursty))
        evidence |= {"busy_pct": seen.busy, "idle_sample_share": idle}
    busy = f"busy {seen.busy:.0f} %" if seen is not None else ""
    title, why, because = _explain(kind, gpu, who, busy, st)
    sentences.append(because)
    if wait is not None:  # the probe's share leads
        title = (f"{gpu} starved: {who} waits on its DataLoader {wait.frac * 100:.0f} % of each "
                 f"step; {why}")
    evidence |= {"workers": st.workers, "pid": proc.pid,
                 "gpu_mem_gib": gib(number(proc.gpu_mem) or 0.0)}
    for name, v in (("worker_cpu_pct", st.worker_cpu), ("main_cpu_pct", st.main_cpu),
                    ("io_pressure_pct", st.io), ("least_busy_core_pct", st.least_busy_core),
                    ("nvlink_share", st.link_share)):
        if v is not None:
            evidence[name] = v
    # The worst moment is kept (engine): one seen from both sides outranks one seen from one,
    # then the larger share of time starved.
    share = wait.frac if wait is not None else 1 - evidence["busy_pct"] / 100
    return Condition(id=ID, severity=max(severities, key=SEVERITIES.index), device=index,
                     pid=proc.pid, title=title, cause=" ".join(sentences), fix=FIX[kind],
                     evidence=evidence, for_s=for_s, score=len(severities) + share)


def _explain(kind: str, gpu: str, who: str, busy: str, st: _Stall) -> tuple[str, str, str]:
    """(the title from outside alone, what the probe's title adds, the cause) of a class.
    The probe's title leads with the wait, so its part is short enough for the title to fit a
    line of the findings panel at 120 columns."""
    wcpu = f"{st.worker_cpu:.0f}" if st.worker_cpu is not None else "?"
    mcpu = f"{st.main_cpu:.0f}" if st.main_cpu is not None else "?"
    if kind == "cpu_loader":
        return (f"{gpu} starved by its input pipeline: {busy}, {st.workers} DataLoader workers "
                f"of {who} at {wcpu} % CPU",
                f"{st.workers} workers at {wcpu} % CPU",
                f"{who} has {st.workers} DataLoader workers at {wcpu} % CPU each. Input pipeline "
                "is CPU-bound.")
    if kind == "no_workers":
        return (f"{gpu} starved: {busy}, {who} loads data in its main process (num_workers=0) "
                f"at {mcpu} % CPU",
                f"num_workers=0, main process at {mcpu} % CPU",
                f"{who} has no DataLoader workers and its main process runs at {mcpu} % CPU: "
                "batches are made between steps.")
    if kind == "io_bound":
        io = f"{st.io or 0.0:.0f}"
        return (f"{gpu} starved by slow reads: {busy}, I/O pressure {io} %, loader of {who} "
                "mostly idle",
                f"I/O pressure {io} %, loader mostly idle",
                f"{who}'s loader runs at {wcpu if st.workers else mcpu} % CPU while I/O pressure "
                f"is {io} %: input is I/O-bound.")
    if kind == "oversubscribed":
        least = f"{st.least_busy_core or 0.0:.0f}"
        return (f"{gpu} starved: {busy}, every host CPU core is busy (least busy {least} %)",
                f"every host core busy (least {least} %)",
                f"All host cores are at >= {HOST_CORE_BUSY:.0f} %: {who}'s loader cannot get "
                "CPU time.")
    if kind == "slow_source":  # only with the probe
        why = "idle loader, no I/O wait: slow storage?"
        return (why, why,
                f"{who}'s loader is not busy (workers {wcpu} %, main {mcpu} % CPU) and the host "
                "shows no I/O wait: it waits on a source that does not count as I/O wait, such "
                "as network storage (NFS, FUSE, an object store).")
    if kind == "communication":  # only without the probe, as host_stall
        share = f"{(st.link_share or 0.0) * 100:.0f}"
        title = (f"{gpu} {busy} while NVLink runs at {share} % of its bandwidth: "
                 "communication-bound?")
        return (title, title,
                f"Its NVLinks carry {share} % of their nominal bandwidth: {who} is probably "
                "waiting on collectives, not on input.")
    title = f"{gpu} {busy}: {who} is waiting on the host side"
    return (title, title,
            f"{who}'s loader is not saturated (workers {wcpu} %, main {mcpu} % CPU): a host-side "
            "stall, not necessarily data.")


def _outside_severity(window: Sequence[Snapshot], index: int, kind: str, st: _Stall,
                      bursty: bool) -> str:
    if kind == "communication":
        return "info"
    loader = (st.worker_cpu if st.workers else st.main_cpu) or 0.0
    if kind == "host_stall" and not bursty and loader < LOADER_IDLE:
        return "info"  # R1 guard: a small model that cannot fill the GPU
    return "critical" if _critical(window, index) else "warning"


def _critical(window: Sequence[Snapshot], index: int) -> bool:
    if not covers(window, CRITICAL_WINDOW_S, 0.95):
        return False
    busy = busy_mean(window, index)[1]
    return busy is not None and busy < CRITICAL_BUSY


def _metric_name(metric: str) -> str:
    return "GPM graphics activity" if metric == "gr_active" else "NVML utilization"


def _quote(s: str) -> str:
    return f"`{s}`"


# Every tick rather than every slow tick: a stall is flagged only if the 20 s mean stays low for
# the whole `for`, and a 5 s cadence would add up to 5 s to each end of that hold.
STARVATION = Diagnostic(name="starvation", check=check, window_s=CRITICAL_WINDOW_S, for_s=FOR_S,
                        clear_s=CLEAR_S, every_s=0.0)
