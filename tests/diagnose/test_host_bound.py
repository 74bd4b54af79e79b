"""step.host_bound: the GPU mostly waits while its own process's main thread is pegged."""

from __future__ import annotations

from dataclasses import replace

from gputop.diagnose import Engine
from gputop.diagnose.rules import host_bound, starvation
from gputop.model import ChildProcess, ProbeStats, ProcessSample, Snapshot
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
SLOW = 30  # the loop turns host-bound from this second on


def tick(t: float, *, util: float, gr: float, main_cpu: float = 100.0, workers: int = 0,
         worker_cpu: float = 57.0, mem: int = int(0.75 * GIB),
         probe: ProbeStats | None = None, age: float = 3600.0) -> Snapshot:
    s = node(1, time=T0 + t, util_gpu=util, gr_active=gr)
    p = ProcessSample(pid=4242, device_index=0, gpu_mem=mem, sm_util=gr, name="python3",
                      cmdline=("python3", "train.py"), cpu_percent=main_cpu,
                      create_time=T0 - age, probe=replace(probe, ts=T0 + t) if probe else None,
                      children=tuple(ChildProcess(9000 + k, "pt_data_worker", worker_cpu, GIB)
                                     for k in range(workers)))
    return replace(s, processes=(p,))


def run(seconds: int, slow: dict[str, object], *, until: int = 10**9,
        **always: object) -> list[Snapshot]:
    """Healthy (util 94 %, 6 workers at 57 %) before SLOW and from `until`; `slow` between."""
    out = []
    for t in range(seconds):
        if SLOW <= t < until:
            out.append(tick(t, **{**always, **slow}))  # type: ignore[arg-type]
        else:
            out.append(tick(t, util=94.0, gr=95.0, workers=6,
                            **{k: v for k, v in always.items() if k != "workers"}))  # type: ignore[arg-type]
    return out


PAGEABLE = dict(util=18.0, gr=0.5)  # copies in the loop: NVML util 18 %, SMs ~idle


def shown(snaps: list[Snapshot], engine: Engine | None = None) -> list[float]:
    engine = engine or Engine([host_bound.HOST_BOUND, starvation.STARVATION])
    return [s.time - T0 for s in snaps
            if any(f.id == host_bound.ID for f in engine.update(s))]


def test_pageable_copies_in_the_main_loop_are_named_within_30_seconds() -> None:
    snaps = run(120, PAGEABLE)
    engine = Engine([host_bound.HOST_BOUND, starvation.STARVATION])
    seen = shown(snaps, engine)
    assert seen and seen[0] - SLOW <= 30
    (f,) = engine.open_findings()  # whatever its small GPU memory; and no starvation finding
    assert (f.id, f.pid, f.severity) == (host_bound.ID, 4242, "warning")
    assert f.title == ("GPU0 waits on the host: PID 4242 `train.py` main thread at 100 % CPU, "
                       "GPU copying (util 18 %, engine 0 %)")
    assert len(f.title) <= 105  # one line of the findings panel at 120 columns
    assert "its time on the GPU is copies: NVML util 18 %, graphics engine 0 %" in f.cause
    assert "pin_memory=True" in f.fix and ".item()" in f.fix and "num_workers>0" in f.fix


def test_it_clears_within_10_seconds_of_the_step_recovering() -> None:
    snaps = run(150, PAGEABLE, until=90)
    seen = shown(snaps)
    assert seen[0] < 90 and 90 <= seen[-1] < 100


def test_a_probe_that_sees_no_loader_wait_says_the_step_itself_is_host_bound() -> None:
    probe = ProbeStats(ts=0.0, steps=900, step_time_s=0.09, wait_frac=0.01,
                       recent_wait_frac=0.01)
    snaps = run(120, dict(util=18.0, gr=17.0), probe=probe)
    engine = Engine([host_bound.HOST_BOUND])
    engine.run(snaps)
    (f,) = engine.open_findings()
    assert "GPU busy 17 %" in f.title and "sees no wait on the DataLoader" in f.cause


def test_a_loop_the_probe_sees_waiting_on_its_loader_is_starvation_instead() -> None:
    # num_workers=0 measured on an H100 (docs/diagnostics.md §5.4): 78 % of each 90 ms step
    # waiting, util 18 %.
    probe = ProbeStats(ts=0.0, steps=900, step_time_s=0.09, wait_frac=0.78,
                       recent_wait_frac=0.78)
    snaps = run(120, dict(util=18.0, gr=17.0, main_cpu=268.0), probe=probe, mem=20 * GIB)
    found = Engine([host_bound.HOST_BOUND, starvation.STARVATION]).run(snaps)
    assert {f.id for f in found} == {starvation.ID}
    assert "num_workers=0" in found[0].title


def test_pauses_busy_loaders_and_slow_computing_steps_are_not_host_bound() -> None:
    # A checkpoint: the GPU idle while the main thread pickles the state.
    assert shown(run(120, dict(util=0.0, gr=0.0), until=90)) == []
    # An eval pass: forward steps at 60 %, the training loader idle.
    assert shown(run(150, dict(util=60.0, gr=60.0, workers=6, worker_cpu=0.0), until=120)) == []
    # Starved by pegged DataLoader workers: that is starvation's.
    assert shown(run(120, dict(util=18.0, gr=17.0, workers=2, worker_cpu=100.0))) == []
    # The main thread not pegged: the host is not what it waits on.
    assert shown(run(120, dict(util=18.0, gr=17.0, main_cpu=40.0))) == []
    # A process in its first seconds is starting up: born at second 25, named from 35 on.
    young = [tick(t, util=18.0, gr=0.5, age=-25.0) for t in range(60)]
    assert shown(young)[0] >= 25 + host_bound.MIN_AGE_S
