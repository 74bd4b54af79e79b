"""Writes the recording that `gputop --demo` plays: a synthetic 8x H100 training node.

The recording is synthetic. No GPU took part: every number comes from a seeded `random.Random`
driving small physical models, so the same command always writes the same ticks. The constants are
the facts measured on a real H100 80GB HBM3 (driver 580.159.04) in the diagnostics notes: memory
sizes, clock and power limits, temperature thresholds, how NVML utilization, the power limiter and
the clock-event reasons behave.

How a tick is made:

* A training timeline (FSDP, 8 ranks, 4 micro-batches per optimizer step) says, per rank, when
  kernels ran, when the rank waited for its batch, and when it spun in NCCL for a slower peer.
  NVML utilization is the busy share of the last 200 ms; GPM metrics, power and NVLink bytes are
  the shares of the last second. The gradient reduce-scatter of each optimizer step is the NVLink
  burst.
* Power: kernels at 1980 MHz would draw far more than 700 W, so while they run the limiter holds
  the card at 700 W (clock ~1350-1515 MHz, `sw_power_cap`); reported power is the 1 s average.
  The clock and reasons are read at the tick instant, as NVML does.
* Temperature follows power with thermal inertia (first-order lag). When a GPU nears 87 C the
  driver's software slowdown lowers its clock limit (`sw_thermal`). Cumulative counters (energy,
  throttle time, NVLink replays) only grow.
* Processes: NVML memory is allocator reserved + NCCL buffers + CUDA context; host CPU per core
  follows the processes' CPU, and PSI and load average are the kernel's moving averages of it.
* Each rank runs the in-process probe (`python -m gputop.probe`), published once a second at its
  own phase: PyTorch's allocated memory (~70-80 % of reserved between and inside steps, per-step
  peaks ~93-95 %), and the steps with the time each waited in `next()` on its DataLoader. The
  probe's numbers come from their own seeded generator, so the NVML side is the same with or
  without them.

Story (tick = 1 s):

| ticks   | phase    | what the dashboard shows                                                  |
|---------|----------|---------------------------------------------------------------------------|
| 0-30    | warm-up  | checkpoint read from disk (IO pressure; copies alone: util ~5, GPM        |
|         |          | gr_active 0, PCIe RX ~1 GB/s), memory ramps to ~62-71 GiB per rank,       |
|         |          | the DataLoader workers appear, util ramps up from the first step at 13    |
| 30-130  | steady   | util 97-100, ~690 W power-capped, SM ~1400 MHz, NVLink bursts             |
| 130-330 | starved  | data-loader starvation: util sawtooth (mean ~45), gr_active low, ~370 W,  |
|         |          | all 48 DataLoader workers at ~100 % CPU, cap only during compute bursts   |
| 330-450 | steady   | as before                                                                 |
| 450-520 | hot      | GPU 5 cooling degrades: 86-88 C, margin ~0, `sw_thermal`, SM ~1100 MHz;   |
|         |          | it is the straggler, the other ranks wait in NCCL (util, power dip)       |
| 520-600 | leak     | steady again; GPU 2's training process grows ~40 MiB/s: the probe shows   |
|         |          | it as allocated tensors (the cache stays as it was), no allocator retries |

Throughout: GPU 6 NVLink 11 replay counter creeps up; a Jupyter kernel (docker) idles on GPU 7.

Usage: python tools/make_demo.py [OUT]   (default: src/gputop/data/demo-8xh100.jsonl.gz)
"""

from __future__ import annotations

import math
import os
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gputop import __version__
from gputop.model import (
    UNSUPPORTED,
    ChildProcess,
    DeviceSample,
    HostSample,
    JobInfo,
    LinkSample,
    Missing,
    ProbeStats,
    ProcessSample,
    Snapshot,
    SystemInfo,
    Topology,
    value,
)
from gputop.probe import recent_wait_frac
from gputop.recording import RecordingWriter, summary_place
from gputop.report.summary import SummaryKeeper

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "src/gputop/data/demo-8xh100.jsonl.gz"
META = {"synthetic": True, "node": "8x H100 80GB HBM3 (synthetic demo)",
        "generator": "tools/make_demo.py"}
SEED = 48213
TICKS = 600
START = 1_795_860_000.0  # 2026-11-28 10:00 UTC
N_GPUS = 8
MiB = 1 << 20
GiB = 1 << 30

PHASES = ((0, "warmup"), (30, "steady"), (130, "starved"), (330, "steady"), (450, "hot"),
          (520, "leak"))
HOT_GPU, LEAK_GPU, FLAKY_GPU, FLAKY_LINK = 5, 2, 6, 11

# The GPU, as measured on a real H100 80GB HBM3.
GPU_NAME = "NVIDIA H100 80GB HBM3"
MEM_TOTAL = 85_520_809_984
MEM_RESERVED = 503_316_480  # driver and firmware
POWER_LIMIT = 700.0
CLOCK_SM_MAX, CLOCK_MEM, CLOCK_STEP = 1980, 2619, 15  # SM clocks move in 15 MHz steps
CLOCK_CAPPED = 1395  # median SM clock under dense bf16 GEMMs at the 700 W limit
T_SLOWDOWN, T_SHUTDOWN, T_MAX_OP = 89, 95, 87
BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")  # as a DGX H100 enumerates its GPUs
NVSWITCH_BUS_IDS = ("05", "06", "07", "08")
LINKS_PER_SWITCH = (5, 4, 4, 5)  # each GPU's 18 NVLink 4 links to the 4 NVSwitch chips
LINK_SPEED = 26.5625e9  # bytes/s per link per direction
PCIE_REPLAYS = (7, 0, 2, 0, 0, 1, 0, 0)
THROTTLE_COUNTERS = ("sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake")

# Power and thermal model.
IDLE_W = 112.0  # P0 with a CUDA context and no kernels (clock stays at 1980 MHz)
KERNEL_W = 1420.0  # what this model's kernels would add at 1980 MHz without a limit
SPIN_W = 150.0  # NCCL kernels spinning for a peer
COPY_W = 45.0
POWER_EXP = 2.5  # dynamic power ~ f * V^2, and V rises with f
AMBIENT = (27.0, 28.0, 29.0, 28.0, 30.0, 29.0, 31.0, 30.0)  # deeper in the chassis is warmer
R_NORMAL, R_HOT = 0.052, 0.135  # C per W, GPU die over inlet
TAU_GPU, TAU_MEM = 14.0, 25.0  # s
THERMAL_SET, THERMAL_KP, THERMAL_KI = T_MAX_OP - 1.0, 100.0, 10.0  # the slowdown's PI loop
SYNC_BUSY = 0.6  # share of an NCCL wait that NVML counts as busy (kernel spinning)

# The job.
JOB = JobInfo(slurm_job_id="48213")
RANK_PID0, WORKER_PID0, WORKERS = 2_210_431, 2_211_540, 6
RESERVED_GIB = (68.1, 63.2, 62.4, 65.3, 61.7, 64.2, 63.0, 63.6)  # allocator + NCCL, steady
CONTEXT_EMPTY, CONTEXT_LOADED = 612 * MiB, 742 * MiB  # CUDA context before / after cuBLAS loads
LEAK_CHUNK = 20 * MiB  # 2 chunks a second on average: ~40 MiB/s
ALICE_PID, ALICE_MEM = 1_187_334, 3 * GiB

# The in-process probe in each rank (the notebook on GPU 7 runs none).
PROBE_SEED = SEED + 1
NCCL_BUFFERS = 1280 * MiB  # NCCL's buffers (NVLS on NVSwitch): in NVML's figure, not PyTorch's
NCCL_INIT = 14  # created by the first collective, FSDP's first all-gather
PROBE_STEPS = 50  # step time and loader wait cover the probe's last 50 steps

# The host.
HOSTNAME = "dgx-h100-07"
CPU_COUNT = 104
HOST_MEM_TOTAL = 2_163_852_484_608  # 2 TiB installed; MemTotal excludes what firmware keeps


def phase_at(t: float) -> str:
    name = PHASES[0][1]
    for start, phase in PHASES:
        if t >= start:
            name = phase
    return name


def ramp(t: float, t0: float, t1: float, a: float, b: float) -> float:
    """a before t0, b after t1, linear between."""
    if t <= t0:
        return a
    if t >= t1:
        return b
    return a + (b - a) * (t - t0) / (t1 - t0)


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def quantize(x: float, step: float) -> float:
    return round(x / step) * step


# ----------------------------------------------------------------------------------------------
# Training timeline


@dataclass(frozen=True)
class MicroStep:
    start: float  # ranks start waiting for their batch
    compute_start: float
    end: float  # the slowest rank is done; the next micro-step starts
    compute: tuple[float, ...]  # seconds of kernels per rank; a faster rank spins until `end`
    optimizer: bool  # ends with the gradient reduce-scatter (the NVLink burst)

    def compute_window(self, rank: int) -> tuple[float, float]:
        return self.compute_start, self.compute_start + self.compute[rank]


@dataclass(frozen=True)
class Activity:
    """What one rank's GPU did, as NVML and GPM would see it at tick time."""

    util: float  # busy share of the last 200 ms (NVML utilization)
    compute: float  # share of the last second running the model's kernels
    sync: float  # share of the last second spinning in NCCL for a slower peer
    running: bool  # a model kernel is running at the tick instant
    nvlink: float  # bytes per direction over NVLink in the last second, all links
    h2d: float  # bytes copied host to device in the last second

    @property
    def busy(self) -> float:
        return self.compute + SYNC_BUSY * self.sync


GATHER_BYTES = 20e9  # FSDP all-gathers per micro-step, per direction
REDUCE_BYTES = 85e9  # gradient reduce-scatter at the optimizer step
REDUCE_SECONDS = 0.6
FIRST_STEP = 12.5  # the first micro-step starts (compile, NCCL init before)
WEIGHT_COPY = (4.0, 10.0)  # checkpoint shards copied to the GPUs
WEIGHT_BYTES = 6e9  # per GPU, read from disk at ~1 GB/s


class Timeline:
    """Micro-steps, made as time advances; the phase at a micro-step's start sets its pace."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.steps: list[MicroStep] = []
        self.count = 0

    def advance(self, t: float, straggle: float) -> None:
        """Makes the micro-steps that start before `t`; `straggle` slows the hot GPU's kernels."""
        next_start = self.steps[-1].end if self.steps else FIRST_STEP
        while next_start < t:
            self.steps.append(self._make(next_start, straggle))
            next_start = self.steps[-1].end
        self.steps = [s for s in self.steps if s.end > t - 2.0]

    def _make(self, start: float, straggle: float) -> MicroStep:
        rng = self.rng
        phase = phase_at(start)
        if phase == "starved":
            wait = rng.uniform(0.85, 1.25)  # the workers cannot keep up
        elif phase == "warmup":
            wait = ramp(start, FIRST_STEP, 30.0, 0.5, 0.01) * rng.uniform(0.5, 1.5)
        else:
            wait = rng.uniform(0.002, 0.012)
        base = 2.4 if self.count == 0 else rng.uniform(0.80, 0.85)  # first step: autotuning
        compute = tuple(base * rng.uniform(0.99, 1.01) * (straggle if r == HOT_GPU else 1.0)
                        for r in range(N_GPUS))
        self.count += 1
        cs = start + wait
        return MicroStep(start, cs, cs + max(compute), compute, self.count % 4 == 0)

    def activity(self, rank: int, t: float) -> Activity:
        util = sum(self._busy(s, rank, t - 0.2, t) for s in self.steps) / 0.2
        compute = sum(overlap(*s.compute_window(rank), t - 1.0, t) for s in self.steps)
        sync = sum(overlap(s.compute_window(rank)[1], s.end, t - 1.0, t) for s in self.steps)
        running = any(a <= t < b for a, b in (s.compute_window(rank) for s in self.steps))
        nvlink = sum(self._nvlink(s, t) for s in self.steps)
        return Activity(util, compute, sync, running, nvlink, weight_copy(t))

    @staticmethod
    def _busy(s: MicroStep, rank: int, a: float, b: float) -> float:
        c0, c1 = s.compute_window(rank)
        return overlap(c0, c1, a, b) + SYNC_BUSY * overlap(c1, s.end, a, b)

    @staticmethod
    def _nvlink(s: MicroStep, t: float) -> float:
        span = s.end - s.compute_start
        moved = GATHER_BYTES * overlap(s.compute_start, s.end, t - 1.0, t) / span
        if s.optimizer:
            r0 = s.end - REDUCE_SECONDS
            moved += REDUCE_BYTES * overlap(r0, s.end, t - 1.0, t) / REDUCE_SECONDS
        return moved


def weight_copy(t: float) -> float:
    a, b = WEIGHT_COPY
    return WEIGHT_BYTES / (b - a) * overlap(a, b, t - 1.0, t)


# ----------------------------------------------------------------------------------------------
# GPUs


@dataclass
class GpuState:
    """What carries over from one tick to the next on one GPU."""

    temp: float
    temp_mem: float
    energy_j: float
    throttle_time: dict[str, float]
    clock_limit: float = CLOCK_SM_MAX  # set by the software thermal slowdown
    clock_i: float = CLOCK_SM_MAX  # the slowdown controller's integral term


@dataclass(frozen=True)
class Power:
    clock: int  # MHz at the tick instant
    run_clock: float  # MHz while the model's kernels run
    draw: float  # W, 1 s average
    capped: bool  # the power limiter holds the running kernels' clock at the tick instant
    thermal: bool  # the thermal slowdown holds the clock
    cap_seconds: float  # time the limiter held the clock during the last second


def new_gpu_state(i: int, rng: random.Random) -> GpuState:
    idle = AMBIENT[i] + R_NORMAL * 72.0  # no context before the job: ~72 W
    counters = dict.fromkeys(THROTTLE_COUNTERS, 0.0)
    counters["sw_power_cap"] = round(rng.uniform(150_000, 260_000), 3)  # since driver load
    return GpuState(temp=idle, temp_mem=idle + 5.0, energy_j=round(rng.uniform(2.6e8, 3.2e8), 3),
                    throttle_time=counters)


def power(act: Activity, st: GpuState, rng: random.Random) -> Power:
    """The power limiter and the thermal slowdown decide the clock; the clock, the power."""
    mix = clamp(rng.gauss(1.0, 0.09), 0.75, 1.3)  # the kernel mix varies from tick to tick
    kernel_w = KERNEL_W * mix
    cap_clock = CLOCK_SM_MAX * ((POWER_LIMIT - IDLE_W) / kernel_w) ** (1 / POWER_EXP)
    run_clock = min(cap_clock, st.clock_limit)
    burst = IDLE_W + kernel_w * (run_clock / CLOCK_SM_MAX) ** POWER_EXP
    limited = cap_clock < st.clock_limit
    if limited:
        burst = POWER_LIMIT - abs(rng.gauss(0.0, 2.5))
    draw = (IDLE_W + act.compute * (burst - IDLE_W) + act.sync * SPIN_W
            + COPY_W * copy_share(act) + rng.gauss(0.0, 1.5))
    instant = run_clock if act.running else min(CLOCK_SM_MAX, st.clock_limit)
    clock = int(clamp(quantize(instant, CLOCK_STEP), 345, CLOCK_SM_MAX))
    thermal = st.clock_limit < CLOCK_SM_MAX and (st.clock_limit < cap_clock or not act.running)
    cap_seconds = act.compute * rng.uniform(0.93, 0.99) if limited else 0.0
    return Power(clock, run_clock, round(min(draw, POWER_LIMIT), 1), limited and act.running,
                 thermal, cap_seconds)


def copy_share(act: Activity) -> float:
    """Share of the last second the copy engines were busy (pageable copies run ~20 GB/s)."""
    return min(1.0, act.h2d / 20e9)


def cooling(i: int, t: float) -> float:
    if i != HOT_GPU:
        return R_NORMAL
    if t < 500:
        return ramp(t, 450, 480, R_NORMAL, R_HOT)
    return ramp(t, 519, 524, R_HOT, R_NORMAL)


def update_thermal(i: int, t: float, st: GpuState, p: Power, act: Activity) -> None:
    """Thermal inertia, then the driver's software slowdown that keeps the GPU under 87 C."""
    target = AMBIENT[i] + cooling(i, t) * p.draw
    st.temp += (target - st.temp) * (1 - math.exp(-1 / TAU_GPU))
    target_mem = AMBIENT[i] + 4.0 + 0.6 * cooling(i, t) * p.draw + 8.0 * act.compute
    st.temp_mem += (target_mem - st.temp_mem) * (1 - math.exp(-1 / TAU_MEM))
    err = st.temp - THERMAL_SET
    engaged = st.clock_i < CLOCK_SM_MAX
    if not engaged and err < -1.0:
        st.clock_limit = CLOCK_SM_MAX
        return
    if not engaged:
        st.clock_i = p.run_clock  # takes over from the clock the power limiter left
    st.clock_i = clamp(st.clock_i - THERMAL_KI * err, 900.0, CLOCK_SM_MAX)
    st.clock_limit = clamp(st.clock_i - THERMAL_KP * err, 900.0, CLOCK_SM_MAX)


def update_counters(st: GpuState, p: Power, rng: random.Random) -> None:
    st.energy_j = round(st.energy_j + p.draw, 3)
    tt = st.throttle_time
    if p.cap_seconds:
        tt["sw_power_cap"] = round(tt["sw_power_cap"] + p.cap_seconds, 3)
    if p.thermal:
        tt["sw_thermal"] = round(tt["sw_thermal"] + rng.uniform(0.9, 1.0), 3)


def gpm(act: Activity, rng: random.Random) -> dict[str, float]:
    """GPM metrics over the last second (previous tick's GPM sample as the first)."""
    spin = SYNC_BUSY * act.sync
    raw = {
        "gr_active": 100 * act.busy,
        "sm_active": 100 * (0.95 * act.compute + 0.15 * spin),
        "sm_occupancy": 15.5 * act.compute + 4.0 * spin,
        "tensor_active": 61.0 * act.compute,
        "dram_active": 33.0 * act.compute + 2.0 * copy_share(act),
    }
    return {k: round(clamp(v * rng.uniform(0.97, 1.03), 0.0, 100.0), 1) for k, v in raw.items()}


def nvml_util(act: Activity, rng: random.Random) -> tuple[int, int]:
    """NVML utilization.gpu and .memory: copies count as busy too."""
    busy = max(act.util, copy_share(act))
    gpu = int(clamp(round(100 * busy - abs(rng.gauss(0.0, 1.2))), 0, 100))
    mem = int(clamp(round(36 * busy * rng.uniform(0.9, 1.1)), 0, 100))
    return gpu, mem


def pcie(act: Activity, rng: random.Random) -> tuple[float, float]:
    """RX, TX bytes/s, read in KiB/s."""
    rx = act.h2d + act.compute * rng.uniform(4e6, 12e6)  # token batches are small
    tx = act.compute * rng.uniform(1e6, 4e6) + 2e5  # losses and metrics back to the host
    return float(quantize(rx, 1024)), float(quantize(tx, 1024))


@dataclass(frozen=True)
class GpuStatic:
    uuid: str
    bus_id: str


def device_sample(i: int, static: GpuStatic, t: float, act: Activity, st: GpuState,
                  p: Power, used: int, rng: random.Random) -> DeviceSample:
    util_gpu, util_mem = nvml_util(act, rng)
    pcie_rx, pcie_tx = pcie(act, rng)
    temp = round(st.temp)
    reasons = tuple(r for r, on in (("sw_power_cap", p.capped), ("sw_thermal", p.thermal)) if on)
    return DeviceSample(
        index=i, vendor="nvidia", name=GPU_NAME, uuid=static.uuid, pci_bus_id=static.bus_id,
        util_gpu=util_gpu, util_mem=util_mem,
        mem_total=MEM_TOTAL, mem_used=used, mem_reserved=MEM_RESERVED,
        mem_free=MEM_TOTAL - MEM_RESERVED - used,
        temp_gpu=temp, temp_mem=round(st.temp_mem), temp_slowdown=T_SLOWDOWN,
        temp_shutdown=T_SHUTDOWN, temp_max_operating=T_MAX_OP, temp_margin=T_MAX_OP - temp,
        power_draw=p.draw, power_limit=POWER_LIMIT, power_default_limit=POWER_LIMIT,
        energy_j=st.energy_j,
        clock_sm=p.clock, clock_sm_max=CLOCK_SM_MAX, clock_mem=CLOCK_MEM, clock_mem_max=CLOCK_MEM,
        pstate=0, fan=UNSUPPORTED, persistence_mode=True, compute_capability="9.0",
        throttle=reasons, throttle_time=dict(st.throttle_time),
        pcie_gen=1 if t < WEIGHT_COPY[0] else 5,  # the link downshifts while idle
        pcie_gen_max=5, pcie_width=16, pcie_width_max=16, pcie_rx=pcie_rx, pcie_tx=pcie_tx,
        pcie_replays=PCIE_REPLAYS[i],
        enc_util=0, dec_util=0,
        ecc_enabled=True, ecc_corrected=0, ecc_uncorrected=0, remapped_corrected=0,
        remapped_uncorrected=0, remap_pending=False, remap_failed=False, mig_enabled=False,
        numa_node=i // 4, cpu_affinity=cpu_list(i // 4),
        **gpm(act, rng),
    )


def cpu_list(numa: int) -> str:
    return "0-51" if numa == 0 else "52-103"


# ----------------------------------------------------------------------------------------------
# NVLink


def switch_of(link: int) -> int:
    edge = 0
    for sw, n in enumerate(LINKS_PER_SWITCH):
        edge += n
        if link < edge:
            return sw
    raise ValueError(link)


def link_samples(i: int, act: Activity, replays: int, rng: random.Random) -> list[LinkSample]:
    """NCCL stripes traffic evenly over the 18 links; rates read to 10 MB/s."""
    per_link = act.nvlink / 18
    tx_bias = rng.uniform(0.995, 1.005)
    out = []
    for link in range(18):
        rx = quantize(per_link * rng.uniform(0.995, 1.005), 1e7)
        errors = {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}
        if (i, link) == (FLAKY_GPU, FLAKY_LINK):
            errors["replay"] = replays
        out.append(LinkSample(
            device_index=i, link=link, kind="nvlink", up=True, version="4.0",
            remote_bus_id=f"00000000:{NVSWITCH_BUS_IDS[switch_of(link)]}:00.0",
            remote_kind="switch", speed=LINK_SPEED, rx=rx, tx=quantize(rx * tx_bias, 1e7),
            errors=errors,
        ))
    return out


def topology() -> Topology:
    matrix = tuple(tuple("X" if a == b else "NV18" for b in range(N_GPUS)) for a in range(N_GPUS))
    return Topology(matrix=matrix, cpu_affinity=tuple(cpu_list(i // 4) for i in range(N_GPUS)),
                    numa_affinity=tuple(str(i // 4) for i in range(N_GPUS)))


# ----------------------------------------------------------------------------------------------
# Processes


@dataclass
class RankState:
    rank: int
    reserved: int  # allocator reserved + NCCL buffers, bytes
    target: int  # reserved once training runs
    rss: int
    rss_target: int
    worker_rss: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return RANK_PID0 + self.rank

    def worker_pid(self, k: int) -> int:
        return WORKER_PID0 + WORKERS * self.rank + k


def new_rank(r: int, rng: random.Random) -> RankState:
    target = int(quantize(RESERVED_GIB[r] * GiB, 2 * MiB))
    rss_target = int(quantize(rng.uniform(21, 28) * GiB, 4096))
    return RankState(r, 2 * MiB, target, int(3.4 * GiB), rss_target)


def warmup_fraction(t: float) -> float:
    """Share of the steady allocator reserve held at tick t: weights, then activations, then the
    optimizer states at the first optimizer step."""
    if t < WEIGHT_COPY[1]:
        return ramp(t, WEIGHT_COPY[0], WEIGHT_COPY[1], 0.0, 0.12)
    if t < 18:
        return ramp(t, 13, 16, 0.12, 0.78)
    return ramp(t, 18, 27, 0.95, 1.0)


def grow_memory(rs: RankState, t: int, rng: random.Random) -> None:
    if t < 30:
        want = int(quantize(rs.target * warmup_fraction(t), 2 * MiB))
        rs.reserved = max(rs.reserved, want, 2 * MiB)
    elif rs.rank == LEAK_GPU and phase_at(t) == "leak":
        rs.reserved += LEAK_CHUNK * rng.choice((1, 2, 2, 3))
    rs.rss = int(quantize(ramp(t, 2, 14, 3.4 * GiB, rs.rss_target), 4096))
    if t >= 14 and rng.random() < 0.3:
        rs.rss += 4096 * rng.randint(-64, 96)


def main_cpu(phase: str, act: Activity, rng: random.Random) -> float:
    """The training loop spins in cudaStreamSynchronize: ~100 % of a core, plus helper threads."""
    if phase == "starved":
        return round(rng.uniform(60.0, 76.0), 1)  # blocked on the workers' queue part of the time
    if act.compute < 0.05 and act.h2d == 0:
        return round(rng.uniform(96.0, 104.0), 1)  # importing, compiling, NCCL init
    return round(rng.uniform(99.0, 106.0), 1)


def worker_cpu(phase: str, t: int, rng: random.Random) -> float:
    if phase == "starved":
        return round(clamp(rng.gauss(99.2, 0.9), 95.0, 101.5), 1)
    if phase == "warmup" and t < 16:
        return round(rng.uniform(92.0, 100.5), 1)  # filling the prefetch queue
    mean = 47.0 if phase == "hot" else 61.0
    return round(clamp(rng.gauss(mean, 5.0), 20.0, 90.0), 1)


def workers(rs: RankState, phase: str, t: int, rng: random.Random) -> tuple[ChildProcess, ...]:
    if t < 11:
        return ()
    if not rs.worker_rss:
        rs.worker_rss = [int(quantize(rng.uniform(2.1, 2.6) * GiB, 4096)) for _ in range(WORKERS)]
    for k in range(WORKERS):
        if rng.random() < 0.2:
            rs.worker_rss[k] += 4096 * rng.randint(-32, 48)
    return tuple(ChildProcess(rs.worker_pid(k), "pt_data_worker", worker_cpu(phase, t, rng),
                              rs.worker_rss[k]) for k in range(WORKERS))


def rank_process(rs: RankState, t: int, act: Activity, rng: random.Random,
                 probe: ProbeStats | None = None) -> ProcessSample:
    phase = phase_at(t)
    context = CONTEXT_EMPTY if t < WEIGHT_COPY[1] else CONTEXT_LOADED
    spin = SYNC_BUSY * act.sync
    return ProcessSample(
        pid=rs.pid, device_index=rs.rank, kind="compute", gpu_mem=rs.reserved + context,
        sm_util=percent(74 * act.compute + 10 * spin, rng),
        mem_util=percent(23 * act.compute, rng),
        user="mlteam", name="python3",
        cmdline=("/usr/bin/python3", "-u", "train.py", "--config", "configs/llama-8b.yaml",
                 f"--local_rank={rs.rank}"),
        cpu_percent=main_cpu(phase, act, rng), rss=rs.rss, create_time=START - 6.2,
        job=JOB, children=workers(rs, phase, t, rng), probe=probe,
    )


def percent(x: float, rng: random.Random) -> int:
    """A per-process utilization: NVML reports none (0) for a process with no kernels."""
    return round(clamp(x + rng.gauss(0, 1.5), 0, 100)) if x > 0 else 0


def alice_process(container_id: str, rng: random.Random) -> ProcessSample:
    return ProcessSample(
        pid=ALICE_PID, device_index=7, kind="compute", gpu_mem=ALICE_MEM, sm_util=0, mem_util=0,
        user="alice", name="python",
        cmdline=("/opt/conda/bin/python", "-m", "ipykernel_launcher", "-f",
                 "/home/alice/.local/share/jupyter/runtime/kernel-3f0e4b2a.json"),
        cpu_percent=rng.choice((0.0, 0.0, 0.0, 0.0, 1.0)), rss=2_947_284_992,
        create_time=START - 3 * 3600 - 1234.5,
        job=JobInfo(container_id=container_id, container_runtime="docker"),
    )


# ----------------------------------------------------------------------------------------------
# The in-process probe


@dataclass(frozen=True)
class ProbedStep:
    start: float  # the loop asked for the batch
    loader_end: float  # the batch arrived
    end: float  # the loop asks for the next one


class Probes:
    """What `gputop.probe` publishes in each rank: the allocator's memory and the training loop.

    Every rank runs the same steps (FSDP keeps them in lock step), so one log of steps serves
    all; each rank publishes at its own phase within the second. In the warm-up only the first
    step waits for its batch: after it the workers' prefetch queue is full, and the gaps
    between steps are the host compiling and autotuning, not `next()`."""

    def __init__(self) -> None:
        self.rng = random.Random(PROBE_SEED)
        self.offsets = [round(self.rng.uniform(0.05, 0.95), 3) for _ in range(N_GPUS)]
        self.steps: list[ProbedStep] = []

    def observe(self, timeline: Timeline) -> None:
        last = self.steps[-1].start if self.steps else -1.0
        for s in timeline.steps:
            if s.start > last:
                first = not self.steps
                waits = first or phase_at(s.start) != "warmup"
                self.steps.append(ProbedStep(s.start, s.compute_start if waits else s.start,
                                             s.end))

    def stats(self, rs: RankState, t: int, act: Activity) -> ProbeStats:
        ts = t - self.offsets[rs.rank]
        done = [s for s in self.steps[-PROBE_STEPS - 4:] if s.end <= ts][-PROBE_STEPS:]
        count = len(self.steps) - sum(1 for s in self.steps[-4:] if s.end > ts)
        wall = sum(s.end - s.start for s in done)
        wait = sum(s.loader_end - s.start for s in done)
        stalled = next((ts - s.start for s in self.steps[-3:] if s.start <= ts < s.loader_end),
                       0.0)
        step_time = wall / len(done) if done else None
        latest = recent_wait_frac([(s.end - s.start, s.loader_end - s.start) for s in done],
                                  stalled)
        wall, wait = wall + stalled, wait + stalled
        return ProbeStats(
            ts=round(START + ts, 3), device=rs.rank, **self._memory(rs, t, act),
            steps=count, step_time_s=None if step_time is None else round(step_time, 4),
            loader_wait_s=round(wait, 4),
            wait_frac=round(min(1.0, wait / wall), 4) if wall > 0 else None,
            recent_wait_frac=None if latest is None else round(latest, 4))

    def _memory(self, rs: RankState, t: int, act: Activity) -> dict[str, int]:
        """PyTorch's allocator: NVML's reserve less NCCL's buffers; a leak is in tensors."""
        rng = self.rng
        reserved = rs.reserved - (NCCL_BUFFERS if t >= NCCL_INIT else 0)
        leaked = max(0, rs.reserved - rs.target) if t >= 30 else 0
        steady = reserved - leaked
        # Weights, gradients and optimizer states between steps; activations inside one.
        share = rng.uniform(0.74, 0.80) if act.running else rng.uniform(0.70, 0.72)
        allocated = int(quantize(steady * share, 512)) + leaked
        peak = int(quantize(steady * rng.uniform(0.925, 0.955), 512)) + leaked
        active = min(reserved, allocated + int(quantize(allocated * rng.uniform(0.002, 0.006),
                                                         512)))
        return {
            "allocated": allocated, "reserved": reserved, "active": active,
            "inactive_split": int(quantize((reserved - active) * rng.uniform(0.08, 0.2), 512)),
            "peak_allocated": max(allocated, peak) if act.compute > 0 else allocated,
            "peak_reserved": reserved, "num_alloc_retries": 0, "num_ooms": 0,
        }


# ----------------------------------------------------------------------------------------------
# Host


@dataclass
class HostState:
    load: list[float] = field(default_factory=lambda: [3.1, 1.9, 1.2])
    psi: dict[str, float] = field(default_factory=lambda: {"cpu": 0.4, "io": 0.1, "mem": 0.0})


def core_of(rank: int, slot: int) -> int:
    """Ranks 0-3 run on NUMA node 0 (cores 0-51), 4-7 on node 1; 13 cores each."""
    return 52 * (rank // 4) + 13 * (rank % 4) + slot


def per_core(procs: Sequence[ProcessSample], rng: random.Random) -> tuple[float, ...]:
    """/proc/stat counts in 1/100 s, so over 1 s every core reads a whole percent."""
    cores = [float(rng.choice((0, 0, 0, 1, 1, 2))) for _ in range(CPU_COUNT)]
    cores[0] += rng.randint(2, 6)  # slurmd, sshd, the monitor itself
    for p in procs:
        if p.job is not JOB:
            continue
        cpu = value(p.cpu_percent, 0.0)
        cores[core_of(p.device_index, 0)] += min(cpu, 100.0)
        cores[core_of(p.device_index, 7)] += max(0.0, cpu - 100.0)  # helper threads
        for k, w in enumerate(p.children):
            cores[core_of(p.device_index, 1 + k)] += w.cpu_percent
    return tuple(float(round(min(c, 100.0))) for c in cores)


def host_sample(hs: HostState, t: int, procs: Sequence[ProcessSample],
                rng: random.Random) -> HostSample:
    cores = per_core(procs, rng)
    busy = sum(cores) / 100
    io = WEIGHT_COPY[0] <= t <= WEIGHT_COPY[1]
    running = busy + 1.2 + (4.0 if io else 0.0)
    for k, window in enumerate((60.0, 300.0, 900.0)):
        e = math.exp(-1 / window)
        hs.load[k] = hs.load[k] * e + running * (1 - e)
    instant = {"cpu": 0.3 + 2.5 * busy / CPU_COUNT + rng.uniform(0, 0.3),
               "io": rng.uniform(18, 30) if io else rng.uniform(0.0, 0.5), "mem": 0.0}
    for k, v in instant.items():
        hs.psi[k] += (v - hs.psi[k]) * (1 - math.exp(-1 / 10))
    used = host_mem_used(procs)
    return HostSample(
        hostname=HOSTNAME, cpu_count=CPU_COUNT, cpu_percent=round(sum(cores) / CPU_COUNT, 1),
        cpu_percent_per_core=cores,
        iowait_percent=round(rng.uniform(3.0, 6.0) if io else rng.uniform(0.1, 0.4), 1),
        load_avg=(round(hs.load[0], 2), round(hs.load[1], 2), round(hs.load[2], 2)),
        mem_total=HOST_MEM_TOTAL, mem_used=used, mem_available=HOST_MEM_TOTAL - used - 38 * GiB,
        swap_used=0, psi_cpu_some=round(hs.psi["cpu"], 2), psi_io_some=round(hs.psi["io"], 2),
        psi_mem_some=round(hs.psi["mem"], 2),
    )


def host_mem_used(procs: Sequence[ProcessSample]) -> int:
    """Forked workers share most pages with their parent; count a sixth of theirs."""
    used = 21 * GiB
    for p in procs:
        used += value(p.rss, 0)
        used += sum(w.rss for w in p.children) // 6
    return int(quantize(used, 4096))


# ----------------------------------------------------------------------------------------------
# The node, tick by tick


class DemoNode:
    def __init__(self, seed: int = SEED) -> None:
        rng = random.Random(seed)
        self.rng = rng
        self.static = [GpuStatic(random_uuid(rng), f"00000000:{BUS_IDS[i]}:00.0")
                       for i in range(N_GPUS)]
        self.gpus = [new_gpu_state(i, rng) for i in range(N_GPUS)]
        self.ranks = [new_rank(r, rng) for r in range(N_GPUS)]
        self.container_id = f"{rng.getrandbits(256):064x}"
        self.host = HostState()
        self.timeline = Timeline(rng)
        self.probes = Probes()
        self.replays = 4
        self.topology = topology()
        self.system = SystemInfo(
            hostname=HOSTNAME, backends=("nvml",), driver_version="580.159.04",
            cuda_version="13.0", nvml_version="13.580.159.04",
            rocm_version=Missing("unsupported"), gputop_version=__version__,
        )

    def straggle(self) -> float:
        """How much longer the hot GPU's kernels take than when only the power cap holds it."""
        return max(1.0, CLOCK_CAPPED / self.gpus[HOT_GPU].clock_limit)

    def snapshot(self, t: int) -> Snapshot:
        rng = self.rng
        self.timeline.advance(float(t), self.straggle())
        acts = [self.timeline.activity(i, float(t)) for i in range(N_GPUS)]
        self.probes.observe(self.timeline)
        procs: list[ProcessSample] = []
        for rs, act in zip(self.ranks, acts):
            grow_memory(rs, t, rng)
            procs.append(rank_process(rs, t, act, rng, self.probes.stats(rs, t, act)))
        procs.append(alice_process(self.container_id, rng))
        if rng.random() < 0.05:
            self.replays += 1
        devices, links = [], []
        for i, act in enumerate(acts):
            devices.append(self._device(i, t, act, procs))
            links += link_samples(i, act, self.replays, rng)
        return Snapshot(
            time=round(START + t + rng.uniform(0.001, 0.012), 3), system=self.system,
            host=host_sample(self.host, t, procs, rng), devices=tuple(devices),
            processes=tuple(procs), links=tuple(links), topology=self.topology,
        )

    def _device(self, i: int, t: int, act: Activity, procs: list[ProcessSample]) -> DeviceSample:
        st, rng = self.gpus[i], self.rng
        p = power(act, st, rng)
        update_thermal(i, t, st, p, act)
        update_counters(st, p, rng)
        used = sum(value(q.gpu_mem, 0) for q in procs if q.device_index == i)
        return device_sample(i, self.static[i], t, act, st, p, used, rng)


def random_uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def write_demo(out: Path, seed: int = SEED) -> int:
    """Writes the demo recording to `out` (replacing it); returns its size in bytes."""
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    node = DemoNode(seed)
    with RecordingWriter(tmp, meta=META, summarizer=SummaryKeeper()) as w:
        for t in range(TICKS):
            w.write(node.snapshot(t))
    os.replace(tmp, out)
    return out.stat().st_size


def main(argv: Sequence[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    size = write_demo(out)
    place = summary_place(out)
    ticks = place[0] if place is not None else size  # the summary is the same for a day
    print(f"{out}: {TICKS} ticks, {size} bytes of which the summary for `gputop report` "
          f"{size - ticks} ({ticks / (TICKS / 3600 * N_GPUS):.0f} B/GPU-hour of ticks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
