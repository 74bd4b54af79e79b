"""job.straggler: one rank of a synchronous job slower than its peers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gputop.diagnose import Engine
from gputop.diagnose.rules import straggler
from gputop.model import JobInfo, ProcessSample, Snapshot
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
SLURM = JobInfo(slurm_job_id="48213")


def rank(i: int, job: JobInfo | None, cmd: tuple[str, ...] | None = None) -> ProcessSample:
    return ProcessSample(pid=6000 + i, device_index=i, gpu_mem=60 * GIB, user="ml",
                         cmdline=cmd or ("python3", "train.py", f"--local_rank={i}"), job=job)


def job_tick(t: int, slow: dict[str, Any] | None = None, *, n: int = 8, slow_gpu: int = 5,
             job: JobInfo | None = SLURM) -> Snapshot:
    s = node(n, time=T0 + t, util_gpu=97.0, gr_active=95.0, clock_sm=1400 + 15 * (t % 3))
    devs = tuple(replace(d, **slow) if slow and d.index == slow_gpu else d for d in s.devices)
    return replace(s, devices=devs, processes=tuple(rank(i, job) for i in range(n)))


THERMAL = dict(clock_sm=1110, temp_gpu=87.0, temp_margin=0.0, throttle=("sw_thermal",))


def hot(t: int) -> dict[str, Any]:
    return {**THERMAL, "throttle_time": {"sw_power_cap": 0.0, "sw_thermal": 0.95 * t}}


def test_a_thermally_throttled_rank_is_named_the_straggler() -> None:
    snaps = [job_tick(t, hot(t) if t >= 20 else None) for t in range(120)]
    found = Engine([straggler.STRAGGLER]).run(snaps)
    assert [(f.id, f.device, f.pid) for f in found] == [("job.straggler", 5, 6005)]
    f = found[0]
    assert f.severity == "warning" and f.until is None
    assert "GPU5 is the straggler of Slurm job 48213" in f.title
    assert "SM clock 1110 vs 14" in f.title and "7 peers" in f.title
    assert "thermal slowdown, 87 °C vs 55 °C" in f.title and "airflow" in f.fix
    assert f.since - T0 <= 20 + straggler.WINDOW_S


def test_ranks_are_grouped_by_command_line_without_the_rank_argument() -> None:
    snaps = [job_tick(t, hot(t), job=None) for t in range(80)]
    conds = straggler.check(snaps)
    assert [c.device for c in conds] == [5] and "of its job" in conds[0].title


def test_a_rank_with_a_slow_input_has_a_lower_busy_share() -> None:
    snaps = [job_tick(t, {"gr_active": 55.0}, slow_gpu=2) for t in range(60)]
    (c,) = straggler.check(snaps)
    assert c.device == 2 and "busy 55 % vs 95 %" in c.title and "input" in c.title


def test_a_uniform_job_has_no_straggler() -> None:
    assert Engine([straggler.STRAGGLER]).run([job_tick(t) for t in range(120)]) == []


def test_different_jobs_are_not_compared() -> None:
    # Eight single-GPU jobs: one runs hotter and slower, but it waits for no one.
    snaps = []
    for t in range(60):
        s = job_tick(t, hot(t))
        snaps.append(replace(s, processes=tuple(
            replace(p, job=JobInfo(slurm_job_id=str(100 + p.device_index)))
            for p in s.processes)))
    assert straggler.check(snaps) == []


def test_two_gpus_are_too_few_to_name_one() -> None:
    assert straggler.check([job_tick(t, hot(t), n=2, slow_gpu=1) for t in range(60)]) == []
