"""R1 loader.starvation, outside-in, on synthetic 8x H100 windows."""

from __future__ import annotations

from dataclasses import replace

from gputop.diagnose import Engine
from gputop.diagnose.rules import starvation
from gputop.model import ChildProcess, HostSample, JobInfo, Missing, ProcessSample, Snapshot
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
STALL = 120  # the loader stalls from this second on


def trainer(i: int, *, workers: int = 6, worker_cpu: float = 60.0, main_cpu: float = 101.0,
            age: float = 3600.0, mem: int = 62 * GIB, sm: float = 80.0) -> ProcessSample:
    return ProcessSample(
        pid=4242 + i, device_index=i, gpu_mem=mem, sm_util=sm, user="ml", name="python3",
        cmdline=("/usr/bin/python3", "train.py", f"--local_rank={i}"), cpu_percent=main_cpu,
        rss=20 * GIB, create_time=T0 - age, job=JobInfo(slurm_job_id="77"),
        children=tuple(ChildProcess(9000 + 10 * i + k, "pt_data_worker", worker_cpu, 2 * GIB)
                       for k in range(workers)))


def tick(t: int, *, busy: float, util: float | None = None, n: int = 8,
         host: HostSample | None = None, **proc: object) -> Snapshot:
    s = node(n, time=T0 + t, util_gpu=busy if util is None else util, gr_active=busy)
    return replace(s, processes=tuple(trainer(i, **proc) for i in range(n)),  # type: ignore[arg-type]
                   host=host or HostSample(cpu_count=104, cpu_percent=30.0,
                                           cpu_percent_per_core=(30.0,) * 104,
                                           iowait_percent=0.3, psi_io_some=0.2))


def sawtooth(t: int) -> tuple[float, float]:
    """(GPM busy over 1 s, NVML util over 200 ms) of a GPU waiting ~55 % of the time."""
    return (90.0, 100.0) if t % 9 < 4 else (5.0, 0.0)


def starved_run(seconds: int = 400, **proc: object) -> list[Snapshot]:
    out = []
    for t in range(seconds):
        if t < STALL:
            out.append(tick(t, busy=97.0))
        else:
            busy, util = sawtooth(t)
            out.append(tick(t, busy=busy, util=util, **proc))
    return out


def window_of(snaps: list[Snapshot]) -> list[Snapshot]:
    return snaps[-int(starvation.CRITICAL_WINDOW_S):]


def test_a_starved_loader_on_8xh100_is_flagged_within_its_for_duration() -> None:
    engine = Engine([starvation.STARVATION])
    first_seen = None
    for s in starved_run(worker_cpu=99.0):
        found = [f for f in engine.update(s) if f.id == "loader.starvation" and f.device == 0]
        if found and first_seen is None:
            first_seen = s.time - T0
            f = found[0]
    assert first_seen is not None
    # Not before the `for` duration, and no later than the window's lag plus the `for`.
    assert STALL + starvation.FOR_S <= first_seen <= STALL + starvation.WINDOW_S + starvation.FOR_S
    assert f.severity == "warning" and f.pid == 4242
    assert "6 DataLoader workers" in f.title and "PID 4242" in f.title and "train.py" in f.title
    assert "99 % CPU" in f.title
    assert "CPU-bound" in f.cause and "bursty" in f.cause
    assert "num_workers" in f.fix
    assert f.evidence["workers"] == 6 and f.evidence["worker_cpu_pct"] >= 95
    assert {g.device for g in engine.open_findings()} == set(range(8))


def test_a_short_dip_like_an_eval_phase_is_not_flagged() -> None:
    snaps = [tick(t, busy=97.0) if not 120 <= t < 210 else tick(t, busy=10.0, util=10.0)
             for t in range(400)]
    assert Engine([starvation.STARVATION]).run(snaps) == []


def test_no_workers_and_a_pegged_main_process_suggests_num_workers() -> None:
    conds = starvation.check(window_of(starved_run(workers=0, main_cpu=100.0)))
    c = next(c for c in conds if c.device == 0)
    assert "num_workers=0" in c.title and "num_workers>0" in c.fix and "pin_memory" in c.fix


def test_idle_workers_and_io_pressure_is_io_bound() -> None:
    host = HostSample(cpu_count=104, cpu_percent=10.0, cpu_percent_per_core=(10.0,) * 104,
                      iowait_percent=18.0, psi_io_some=35.0)
    snaps = [replace(s, host=host) for s in starved_run(worker_cpu=12.0)]
    c = next(c for c in starvation.check(window_of(snaps)) if c.device == 0)
    assert "slow reads" in c.title and "I/O pressure 35 %" in c.title
    assert "NVMe" in c.fix


def test_every_host_core_busy_is_an_oversubscribed_host() -> None:
    host = HostSample(cpu_count=104, cpu_percent=97.0, cpu_percent_per_core=(97.0,) * 104)
    snaps = [replace(s, host=host) for s in starved_run(worker_cpu=70.0)]
    c = next(c for c in starvation.check(window_of(snaps)) if c.device == 0)
    assert "every host CPU core is busy" in c.title and "OMP_NUM_THREADS" in c.fix


def test_a_small_model_that_cannot_fill_the_gpu_is_only_info() -> None:
    # Steady 40 % with no idle samples and idle workers: R1's guard says info, not warning.
    snaps = [tick(t, busy=40.0, util=40.0, worker_cpu=15.0) for t in range(200)]
    c = next(c for c in starvation.check(window_of(snaps)) if c.device == 0)
    assert c.severity == "info" and "host side" in c.title


def test_starved_for_five_minutes_under_30_percent_is_critical() -> None:
    snaps = [tick(t, busy=20.0, util=0.0 if t % 2 else 40.0, worker_cpu=99.0)
             for t in range(320)]
    c = next(c for c in starvation.check(window_of(snaps)) if c.device == 0)
    assert c.severity == "critical"


def test_a_young_process_is_starting_up_not_starved() -> None:
    # Started 40 s into the window: at its last tick it has lived 49 s.
    snaps = [tick(t, busy=10.0, util=0.0, worker_cpu=99.0, age=-40.0) for t in range(90)]
    assert starvation.check(snaps) == []


def test_an_idle_notebook_holding_memory_is_not_the_starved_process() -> None:
    notebook = ProcessSample(pid=31337, device_index=7, gpu_mem=3 * GIB, sm_util=0.0,
                             name="python", cmdline=("python", "-m", "ipykernel_launcher"),
                             cpu_percent=0.0, create_time=T0 - 10_000)
    snaps = [replace(s, processes=(*s.processes, notebook)) for s in starved_run(worker_cpu=99.0)]
    pids = {c.pid for c in starvation.check(window_of(snaps)) if c.device == 7}
    assert pids == {4242 + 7}


def test_a_thermally_throttled_gpu_is_not_called_starved() -> None:
    snaps = []
    for s in starved_run(worker_cpu=99.0):
        hot = tuple(replace(d, throttle_time={**d.throttle_time,  # type: ignore[dict-item]
                                              "sw_thermal": 0.5 * (s.time - T0)})
                    for d in s.devices)
        snaps.append(replace(s, devices=hot))
    assert starvation.check(window_of(snaps)) == []


def test_waiting_on_nvlink_traffic_is_labelled_communication_bound() -> None:
    snaps = []
    for t in range(400):
        busy, util = sawtooth(t)
        s = node(8, time=T0 + t, links=18, util_gpu=util, gr_active=busy)
        links = tuple(replace(lk, speed=26.5e9, rx=20e9, tx=20e9) for lk in s.links)
        snaps.append(replace(s, links=links,
                             processes=tuple(trainer(i, worker_cpu=40.0) for i in range(8))))
    c = next(c for c in starvation.check(window_of(snaps)) if c.device == 0)
    assert c.severity == "info" and "communication-bound?" in c.title


def test_without_gpm_nvml_utilization_is_the_busy_signal() -> None:
    snaps = [replace(s, devices=tuple(replace(d, gr_active=Missing("unsupported"))
                                      for d in s.devices))
             for s in starved_run(worker_cpu=99.0)]
    c = next(c for c in starvation.check(window_of(snaps)) if c.device == 0)
    assert "NVML utilization" in c.cause
