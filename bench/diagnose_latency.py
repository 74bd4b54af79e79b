"""How many seconds each problem takes to show, and what shows that should not.

    python bench/diagnose_latency.py [--hz 1 2] [--seeds 3]

Scripted traces of one H100 at 1 and 2 Hz, fed tick by tick to the diagnostics engine as the
dashboard feeds it (`default_engine`, `Engine.update`, the findings open after each tick). Each
trace is built from a signature measured on an H100 (docs/diagnostics.md),
not from the rules' thresholds:

- healthy: util 93.9 %, GPM ~95 %, SW power cap set at every busy tick, SM clock 1350-1515 MHz
  (median 1395) at 686 W of 700 (§0.3, §5.4); 6 DataLoader workers at 57 % CPU, probe wait 1.3 %
  (§5.4, num_workers=6); the caching allocator grows in one step after the first iterations.
- idle: no context (util 0, `gpu_idle`, SM 345 MHz), then a live context with no kernels (util 0,
  no reason bits, SM 1980 MHz, 0.6 GiB; §0.4, §0.7).
- power-capped: dense bf16 GEMM at its 700 W default limit, the cap counter growing 0.885 s/s
  (1.77 s over ~2 s), SM 1170-1515 MHz (§0.3).
- starved, probe: a real DataLoader with num_workers=0 (§5.4): 90 ms steps waiting 78.2 %, util
  17.7 %, the main process at 268 % CPU; the probe publishes its 50-step and recent shares.
- starved, probe, 2 workers: num_workers=2 (§5.4): 33 ms steps waiting 47.6 %, util 48 %, both
  workers at 100-101 % CPU.
- starved, no probe: the same num_workers=2 job without the probe.
- starved, no probe (num_workers=0): a DataLoader with no workers whose samples torch's threads
  augment in the training process (fixtures/nvidia/h100-train/host_bound, a real H100): NVML util
  47 % (24-74), GPM 44 %, the main process at 1570 % CPU, 1.5 GiB.
- host-bound: pageable host-to-device copies in the main loop: NVML util 18 %, GPM ~0, the main
  thread at 100 % of a core, no DataLoader, 0.75 GiB of GPU memory (the context plus a little).
- copy-bound: pinned host memory copied to the GPU and back with one small product a step
  (fixtures/nvidia/h100-train/copy_bound, a real H100): NVML util 100 %, GPM 0.1 %, PCIe
  28.5 GB/s RX and 30.8 GB/s TX, the main thread at 100 % (it spins in the synchronize), 4.6 GiB,
  133 W. The same recording's pageable copies read util 20 %, GPM 2 %, 8.7 GB/s RX: host-bound.
- fast leak: ~0.9 GiB/s from 3 GiB during training (3 -> 30 GiB in 30 s), in the process's first
  minute; the card is full at the second printed as OOM.
- slow leak: 20 MiB/s from 40 GiB in a process an hour old.
- fragmentation near OOM: the probe's batch-150 peaks under the default allocator: 62.77 GiB
  allocated, 71.48 GiB reserved (§4.2), NVML process memory = reserved + 0.75 GiB.
- thermal: the R5 example: HW thermal in 34 % of the last minute, SM 990 of 1980 MHz, GPU 90 °C
  (slowdown 89 °C), HBM 93 °C (§8 R5; the lent H100 never ran hot, so this one is not measured).
- power brake: HW power brake with the SM clock at 86 of 1980 MHz (8 H100s in one node).
- eval pause: 90 s of evaluation in a healthy run: forward passes at ~60 % util, the training
  loader idle (0 % CPU), the probe's step count still (its loop waits in no next()).
- checkpoint pause: 60 s of torch.save in a healthy run: 2 s of device-to-host copies (util 100,
  GPM 0), then the GPU idle while the main thread pickles at 100 % CPU and the write keeps the
  host's I/O pressure at 35 %.

The problem starts at second 30 of each trace (the first for the idle, leak-from-start and
one-moment classes); "visible" is the seconds from its start to the first tick whose open
findings hold the expected id; "cleared" the seconds from the problem's end to the tick its
finding no longer shows; "false" lists the ids shown that should not be (none expected for the
healthy, idle, capped and paused traces). Seeded: each seed draws the noise again.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from gputop.diagnose import default_engine
from gputop.model import (
    ChildProcess,
    HostSample,
    Missing,
    ProbeStats,
    ProcessSample,
    Snapshot,
)
from gputop.testing.synthetic import GIB, H100_RESERVED, H100_TOTAL, h100
from gputop.testing.synthetic import node as _node

T0 = 1_800_000_000.0
MiB = 1 << 20
START = 30.0  # the problem starts here (the healthy lead-in lets the windows fill)
PID = 4242
CAP_RATE = 1.77 / 2.0  # SW power cap counter seconds per second under dense GEMM (§0.3)


@dataclass
class State:
    """What the trace's GPU and process do at one tick."""

    util: float = 93.9
    gr: float | None = 95.0  # GPM graphics activity; None: no GPM
    clock: int = 1395
    bits: tuple[str, ...] = ("sw_power_cap",)
    held: dict[str, float] = dataclasses.field(default_factory=dict)  # counter s per s
    power: float = 686.0
    temp: float = 51.0
    temp_mem: float = 47.0
    proc_mem: float = 40 * GIB  # the process's NVML memory
    main_cpu: float = 100.0  # a GPU-bound loop spins on CUDA syncs (§5.1)
    workers: int = 6
    worker_cpu: float = 57.0
    probe: tuple[float, float, float] | None = (0.033, 0.013, 0.013)  # step s, 50-step, recent
    stepping: bool = True  # the probe's loop steps (not during eval or a checkpoint)
    peaks: tuple[float, float] | None = None  # probe allocated / reserved peaks
    io: float = 0.2  # PSI io some avg10, %
    proc: bool = True  # a process holds a context
    born: float = T0 - 3600.0
    pcie: tuple[float, float] | None = None  # RX, TX bytes/s; None: the synthetic node's


@dataclass
class Trace:
    name: str
    expect: str | None  # the finding id that names it; None: nothing should show
    seconds: float
    at: Callable[[float, random.Random], State]
    start: float = START
    end: float | None = None  # when the problem stops (for "cleared")
    note: Callable[[], str] | None = None


def healthy(t: float, rng: random.Random) -> State:
    u = min(100.0, rng.gauss(93.9, 2.5))
    return State(util=u, gr=min(100.0, u + rng.gauss(1.0, 1.0)),
                 clock=int(min(1515, max(1350, rng.gauss(1395, 45)))),
                 proc_mem=38 * GIB + (2 * GIB if t >= 8 else 0))  # the allocator's one step


def idle(t: float, rng: random.Random) -> State:
    if t < 30:  # no context at all
        return State(util=0.0, gr=0.0, clock=345, bits=("gpu_idle",), power=68.0, temp=30.0,
                     proc=False, probe=None)
    return State(util=0.0, gr=0.0, clock=1980, bits=(), power=112.0, temp=31.0,
                 proc_mem=0.6 * GIB, main_cpu=0.3, workers=0, probe=None)


def capped(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    return replace(s, util=100.0, gr=min(100.0, rng.gauss(98.4, 0.8)),
                   clock=int(min(1515, max(1170, rng.gauss(1395, 60)))), power=700.0)


def starved_nw0(t: float, rng: random.Random) -> State:
    if t < START:
        return healthy(t, rng)
    u = max(0.0, rng.gauss(17.7, 4.0))
    return State(util=u, gr=max(0.0, u + rng.gauss(0, 2)), clock=1980, bits=(), power=260.0,
                 main_cpu=268.0, workers=0, probe=(0.090, 0.782, 0.782))


def starved_nw2(probe: bool) -> Callable[[float, random.Random], State]:
    def at(t: float, rng: random.Random) -> State:
        if t < START or t >= 150:
            return healthy(t, rng)
        u = min(100.0, max(0.0, rng.gauss(48.0, 10.1)))
        return State(util=u, gr=max(0.0, u + rng.gauss(2, 3)), clock=1980, bits=(),
                     power=380.0, workers=2, worker_cpu=rng.choice((100.0, 101.0)),
                     main_cpu=55.0, probe=(0.033, 0.476, 0.476) if probe else None)
    return at


def starved_main(t: float, rng: random.Random) -> State:
    if t < START or t >= 150:
        return healthy(t, rng)
    u = min(100.0, max(0.0, rng.gauss(47.0, 9.0)))
    return State(util=u, gr=max(0.0, rng.gauss(44.0, 1.5)), clock=1980, bits=(), power=450.0,
                 proc_mem=1.5 * GIB, main_cpu=rng.gauss(1565.0, 20.0), workers=0, probe=None)


def host_bound(t: float, rng: random.Random) -> State:
    if t < START or t >= 90:
        return healthy(t, rng)
    return State(util=max(0.0, rng.gauss(18.0, 3.0)), gr=max(0.0, rng.gauss(0.5, 0.5)),
                 clock=1980, bits=(), power=150.0, proc_mem=0.75 * GIB, main_cpu=100.0,
                 workers=0, probe=None)


def copy_bound(t: float, rng: random.Random) -> State:
    if t < START or t >= 150:
        return healthy(t, rng)
    return State(util=100.0, gr=max(0.0, rng.gauss(0.1, 0.05)), clock=1980, bits=(), power=133.0,
                 proc_mem=4.6 * GIB, main_cpu=100.0, workers=0, probe=None,
                 pcie=(rng.gauss(28.5e9, 0.3e9), rng.gauss(30.8e9, 0.3e9)))


LEAK_RATE = 0.9 * GIB
LEAK_FROM = 3 * GIB


def fast_leak(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    return replace(s, proc_mem=LEAK_FROM + LEAK_RATE * t, born=T0)


def leak_oom_s() -> float:
    return (H100_TOTAL - H100_RESERVED - LEAK_FROM) / LEAK_RATE


def slow_leak(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    return replace(s, proc_mem=40 * GIB + 20 * MiB * max(0.0, t - START))


def fragmented(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    if t < START:
        return s
    return replace(s, proc_mem=71.48 * GIB + 0.75 * GIB, peaks=(62.77 * GIB, 71.48 * GIB))


def thermal(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    if not START <= t < 90:
        return s
    hot = rng.random() < 0.34
    return replace(s, temp=90.0, temp_mem=93.0, clock=990 if hot else 1350,
                   bits=("sw_power_cap", "hw_slowdown", "hw_thermal") if hot
                   else ("sw_power_cap", "sw_thermal"),
                   held={"hw_thermal": 1.0, "sw_thermal": 0.0} if hot else {"sw_thermal": 1.0})


def brake(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    if not START <= t < 90:
        return s
    return replace(s, clock=86, power=120.0, bits=("hw_slowdown", "hw_power_brake"),
                   held={"hw_power_brake": 1.0})


def eval_pause(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    if not START <= t < START + 90:
        return s
    u = min(100.0, max(0.0, rng.gauss(60.0, 15.0)))
    return replace(s, util=u, gr=u, worker_cpu=0.0, stepping=False)


def checkpoint(t: float, rng: random.Random) -> State:
    s = healthy(t, rng)
    if not START <= t < START + 60:
        return s
    copying = t < START + 2
    return replace(s, util=100.0 if copying else 0.0, gr=0.0, clock=1980, bits=(), power=120.0,
                   worker_cpu=0.0, stepping=False, io=35.0)


TRACES = [
    Trace("starved, probe (num_workers=0)", "loader.starvation", 120, starved_nw0),
    Trace("starved, probe (2 workers)", "loader.starvation", 200, starved_nw2(True), end=150),
    Trace("starved, no probe (2 workers)", "loader.starvation", 200, starved_nw2(False),
          end=150),
    Trace("starved, no probe (num_workers=0)", "loader.starvation", 200, starved_main, end=150),
    Trace("host-bound step", "step.host_bound", 150, host_bound, end=90),
    Trace("copy-bound (pinned, both ways)", "gpu.copy_bound", 200, copy_bound, end=150),
    Trace("fast leak", "mem.oom_soon", 84, fast_leak, start=0.0,
          note=lambda: f"card full at {leak_oom_s():.0f} s"),
    Trace("slow leak", "mem.growth", 400, slow_leak),
    Trace("fragmentation near OOM", "mem.fragmentation", 200, fragmented),
    Trace("thermal", "thermal.hw", 240, thermal, end=90),
    Trace("power brake", "power.brake", 240, brake, end=90),
    Trace("healthy", None, 400, healthy),
    Trace("idle", None, 400, idle),
    Trace("power-capped", None, 400, capped),
    Trace("eval pause", None, 300, eval_pause),
    Trace("checkpoint pause", None, 300, checkpoint),
]


def snapshots(trace: Trace, hz: float, seed: int) -> Iterator[Snapshot]:
    rng = random.Random(seed)
    dt = 1.0 / hz
    counters = dict.fromkeys(("sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal",
                              "hw_power_brake"), 0.0)
    read = dict(counters)  # the NVML source reads the counters every 5 s slow tick
    steps = 0
    n = int(trace.seconds * hz)
    for k in range(n):
        t = k * dt
        st = trace.at(t, rng)
        if "sw_power_cap" in st.bits:
            counters["sw_power_cap"] += CAP_RATE * dt
        for reason, rate in st.held.items():
            counters[reason] += rate * dt
        if k % int(5 * hz) == 0:
            read = dict(counters)
        yield _snap(t, st, read, steps)
        if st.probe is not None and st.stepping:
            steps += int(dt / st.probe[0])


def _snap(t: float, st: State, counters: dict[str, float], steps: int) -> Snapshot:
    now = T0 + t
    used = int(st.proc_mem) if st.proc else 0
    over: dict[str, Any] = dict(
        util_gpu=round(st.util), clock_sm=st.clock, throttle=st.bits,
        gr_active=st.gr if st.gr is not None else Missing("unsupported"),
        power_draw=st.power, temp_gpu=st.temp, temp_mem=st.temp_mem,
        temp_margin=87.0 - st.temp, mem_used=used,
        throttle_time=counters,
    )
    if st.pcie is not None:
        over.update(pcie_rx=st.pcie[0], pcie_tx=st.pcie[1])
    dev = h100(0, **over)
    procs: tuple[ProcessSample, ...] = ()
    if st.proc:
        probe = None
        if st.probe is not None:
            step, frac, recent = st.probe
            probe = ProbeStats(ts=now, device=0, steps=steps, step_time_s=step, wait_frac=frac,
                               recent_wait_frac=recent, loader_wait_s=frac * step * 50,
                               allocated=int(st.peaks[0]) if st.peaks else None,
                               reserved=int(st.peaks[1]) if st.peaks else None,
                               peak_allocated=int(st.peaks[0]) if st.peaks else None,
                               peak_reserved=int(st.peaks[1]) if st.peaks else None,
                               num_alloc_retries=0, num_ooms=0)
        procs = (ProcessSample(
            pid=PID, device_index=0, gpu_mem=used, sm_util=st.gr if st.gr is not None else st.util,
            user="ml", name="python3", cmdline=("python3", "train.py"), cpu_percent=st.main_cpu,
            rss=20 * GIB, create_time=st.born, probe=probe,
            children=tuple(ChildProcess(9000 + k, "pt_data_worker", st.worker_cpu, 2 * GIB)
                           for k in range(st.workers))),)
    host = HostSample(cpu_count=104, cpu_percent=25.0, cpu_percent_per_core=(25.0,) * 104,
                      iowait_percent=0.3, psi_io_some=st.io)
    base = _node(1, time=now, processes=False)
    return replace(base, devices=(dev,), processes=procs, host=host)


@dataclass
class Result:
    visible: float | None  # seconds from the problem's start to the expected finding
    critical: float | None  # ... to its first showing as critical
    cleared: float | None  # seconds from the problem's end until it no longer shows
    false: set[str]


def run(trace: Trace, hz: float, seed: int) -> Result:
    engine = default_engine(plugins=False)
    visible = critical = cleared = None
    false: set[str] = set()
    for snap in snapshots(trace, hz, seed):
        t = snap.time - T0
        found = engine.update(snap)
        shown = {f.id for f in found}
        if trace.expect is not None and trace.expect in shown and visible is None \
                and t >= trace.start:
            visible = t - trace.start
        if critical is None and t >= trace.start and any(
                f.id == trace.expect and f.severity == "critical" for f in found):
            critical = t - trace.start
        if trace.end is not None and visible is not None and cleared is None \
                and t >= trace.end and trace.expect not in shown:
            cleared = t - trace.end
        false |= shown - {trace.expect} - _ALSO.get(trace.expect, set())
    return Result(visible, critical, cleared, false)


# Findings that are the same problem seen from another side, not false alarms.
_ALSO = {
    "thermal.hw": {"thermal.sw", "hw.slowdown"},
    "power.brake": {"hw.slowdown"},
    "mem.oom_soon": {"mem.pressure"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hz", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    print(f"{'class':33} {'Hz':>2} {'expected':18} {'visible s':>11} {'critical s':>10} "
          f"{'cleared s':>9}  false alarms")
    for trace in TRACES:
        for hz in args.hz:
            results = [run(trace, hz, seed) for seed in range(args.seeds)]
            vis = [r.visible for r in results]
            clr = [r.cleared for r in results]
            crit = [r.critical for r in results]
            false = sorted(set().union(*(r.false for r in results)))
            print(f"{trace.name:33} {hz:2.0f} {trace.expect or '-':18} "
                  f"{_span(vis) if trace.expect else '-':>11} "
                  f"{_span(crit) if trace.expect else '-':>10} "
                  f"{_span(clr) if trace.end is not None else '-':>9}  "
                  f"{', '.join(false) or '0'}"
                  + (f"  ({trace.note()})" if trace.note else ""))


def _span(xs: list[float | None]) -> str:
    if any(x is None for x in xs):
        got = [x for x in xs if x is not None]
        return "never" if not got else f"{len(got)}/{len(xs)} seen"
    lo, hi = min(xs), max(xs)  # type: ignore[type-var]
    return f"{lo:.1f}" if lo == hi else f"{lo:.1f}-{hi:.1f}"


if __name__ == "__main__":
    main()
