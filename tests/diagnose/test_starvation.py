"""loader.starvation on synthetic 8x H100 windows: seen from outside (NVML and the host), from
inside (the probe's share of each step spent waiting for the DataLoader), and both at once."""

from __future__ import annotations

from dataclasses import replace

from gputop.diagnose import Engine
from gputop.diagnose.rules import starvation
from gputop.model import (
    ChildProcess,
    HostSample,
    JobInfo,
    LinkSample,
    Missing,
    ProbeStats,
    ProcessSample,
    Snapshot,
)
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
STALL = 120  # the loader stalls from this second on


def trainer(i: int, *, workers: int = 6, worker_cpu: float = 60.0, main_cpu: float = 101.0,
            age: float = 3600.0, mem: int = 62 * GIB, sm: float = 80.0,
            probe: ProbeStats | None = None) -> ProcessSample:
    return ProcessSample(
        pid=4242 + i, device_index=i, gpu_mem=mem, sm_util=sm, user="ml", name="python3",
        cmdline=("/usr/bin/python3", "train.py", f"--local_rank={i}"), cpu_percent=main_cpu,
        rss=20 * GIB, create_time=T0 - age, job=JobInfo(slurm_job_id="77"), probe=probe,
        children=tuple(ChildProcess(9000 + 10 * i + k, "pt_data_worker", worker_cpu, 2 * GIB)
                       for k in range(workers)))


def tick(t: int, *, busy: float, util: float | None = None, n: int = 8,
         host: HostSample | None = None, **proc: object) -> Snapshot:
    s = node(n, time=T0 + t, util_gpu=busy if util is None else util, gr_active=busy)
    if isinstance(proc.get("probe"), ProbeStats):  # published at this tick
        proc["probe"] = replace(proc["probe"], ts=T0 + t)  # type: ignore[type-var]
    return replace(s, processes=tuple(trainer(i, **proc) for i in range(n)),  # type: ignore[arg-type]
                   host=host or HostSample(cpu_count=104, cpu_percent=30.0,
                                           cpu_percent_per_core=(30.0,) * 104,
                                           iowait_percent=0.3, psi_io_some=0.2))


def sawtooth(t: int) -> tuple[float, float]:
    """(GPM busy over 1 s, NVML util over 200 ms) of a GPU waiting ~55 % of the time."""
    return (90.0, 100.0) if t % 9 < 4 else (5.0, 0.0)


def starved_run(seconds: int = 400, *, stall_end: int = 10**9,
                **proc: object) -> list[Snapshot]:
    out = []
    for t in range(seconds):
        if not STALL <= t < stall_end:
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
    # Started 40 s into the window: at its last tick it has lived 49 s, loading weights and
    # compiling (no kernels yet: GPM and NVML util at 0) while its workers fill their queues.
    snaps = [tick(t, busy=0.0, util=0.0, worker_cpu=99.0, age=-40.0) for t in range(90)]
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


# -- with the in-process probe ----------------------------------------------------------------


def loop(wait_frac: float, step_s: float = 0.033, recent: float | None = None) -> ProbeStats:
    """What the probe publishes for a loop that spends `wait_frac` of its last 50 steps in
    next(), and `recent` of its last few (None: a probe from before it published that)."""
    return ProbeStats(ts=0.0, steps=5000, step_time_s=step_s, wait_frac=wait_frac,
                      loader_wait_s=wait_frac * step_s * 50, recent_wait_frac=recent)


def probed_run(seconds: int = 400, *, wait_from: int = STALL, wait_until: int = 10**9,
               recent_until: int | None = None, **proc: object) -> list[Snapshot]:
    """`starved_run` where every rank runs the probe, whose loop waits 57 % of each step for
    data between `wait_from` and `wait_until` (its 50-step average trails the stall's end).
    With `recent_until` the probe also publishes its share over the last few steps, which
    falls at that second; without, it is a probe that does not."""
    def probe(t: int) -> ProbeStats:
        frac = 0.57 if wait_from <= t < wait_until else 0.01
        if recent_until is None:
            return loop(frac)
        return loop(frac, recent=0.57 if wait_from <= t < recent_until else 0.01)

    return [replace(s, processes=tuple(
        replace(p, probe=replace(probe(t), ts=s.time)) for p in s.processes))
            for t, s in enumerate(starved_run(seconds, **proc))]


def opened(engine: Engine, snaps: list[Snapshot], device: int = 0) -> float | None:
    """The second (since T0) at which a starvation finding on `device` first shows."""
    for s in snaps:
        if any(f.id == "loader.starvation" and f.device == device for f in engine.update(s)):
            return s.time - T0
    return None


def outside_from(snaps: list[Snapshot]) -> int:
    """The second at which the outside view first holds: the minute's mean busy has to fall."""
    return next(t for t in range(len(snaps)) if starvation.check(snaps[max(0, t - 299):t + 1]))


def test_both_views_of_a_starved_rank_make_one_finding_led_by_the_measured_wait() -> None:
    engine = Engine([starvation.STARVATION])
    snaps = probed_run(worker_cpu=99.0)
    # The probe measures more than half of each step waiting: shown within 10 s of its reading.
    assert opened(engine, snaps) == STALL + starvation.STRONG_WAIT_FOR_S <= STALL + 10
    engine.run(snaps[STALL + int(starvation.STRONG_WAIT_FOR_S) + 1:STALL + 40])  # outside joins
    found = engine.open_findings()
    assert sorted((f.device, f.pid) for f in found) == [(i, 4242 + i) for i in range(8)]
    f = next(f for f in found if f.device == 0)
    assert f.id == "loader.starvation" and f.severity == "critical"  # > 50 % of each step
    assert f.since == T0 + STALL  # the earlier of the two views: the probe's
    assert f.title == ("GPU0 starved: PID 4242 `train.py` waits on its DataLoader 57 % of each "
                       "step; 6 workers at 99 % CPU")
    assert list(f.evidence)[:2] == ["wait_frac", "step_time_s"]  # the measured wait leads
    assert f.evidence["wait_frac"] == 0.57 and f.evidence["busy_pct"] < 70
    assert f.evidence["workers"] == 6 and f.evidence["worker_cpu_pct"] >= 95
    assert f.cause.startswith("Measured in the process by gputop.probe: 57.0 % of step time")
    assert "bursty" in f.cause and "CPU-bound" in f.cause and "num_workers" in f.fix


def test_the_outside_view_alone_still_flags_a_job_without_the_probe() -> None:
    engine = Engine([starvation.STARVATION])
    snaps = starved_run(worker_cpu=99.0)
    seen = outside_from(snaps)
    assert STALL < seen < STALL + starvation.WINDOW_S
    assert opened(engine, snaps) == seen + starvation.FOR_S
    f = next(f for f in engine.open_findings() if f.device == 0)
    assert "wait_frac" not in f.evidence and next(iter(f.evidence)) == "busy_pct"
    assert f.title.startswith("GPU0 starved by its input pipeline: busy ")


def test_a_finding_seen_from_outside_first_starts_there_when_the_probe_joins() -> None:
    # The loop's wait shows in the probe only 100 s into the stall (its window was full of
    # fast steps, or the probe started late): the finding starts when the GPU went idle.
    engine = Engine([starvation.STARVATION])
    snaps = probed_run(wait_from=STALL + 100, worker_cpu=99.0)
    at = opened(engine, snaps)
    seen = outside_from(starved_run(worker_cpu=99.0))
    assert at == seen + starvation.FOR_S <= STALL + 30  # the pegged workers name it outside
    engine.run(snaps[int(at) + 1:])
    f = next(f for f in engine.open_findings() if f.device == 0)
    assert f.since == T0 + seen < T0 + STALL + 100
    assert f.evidence["wait_frac"] == 0.57


def test_the_finding_ends_when_the_last_view_clears_and_closes_after_the_hold() -> None:
    # The stall ends at 330; the GPU's minute average recovers before the probe's 50 steps do.
    snaps = probed_run(500, stall_end=330, wait_until=372, worker_cpu=99.0)
    engine = Engine([starvation.STARVATION])
    engine.run(snaps[:372 + 2])
    assert len([f for f in engine.open_findings() if f.device == 0]) == 1  # still in its hold
    engine.run(snaps[372 + 2:372 + 4])
    assert not [f for f in engine.open_findings() if f.device == 0]  # closed 3 s after
    timeline = [f for f in Engine([starvation.STARVATION]).run(snaps) if f.device == 0]
    assert [(f.since - T0, f.until and f.until - T0) for f in timeline] == [(STALL, 372)]


def test_the_finding_ends_within_seconds_of_the_loader_catching_up() -> None:
    # The stall ends at 330; the probe's share over its last few steps falls 3 s later, long
    # before its 50-step share (372) or the GPU's minute average (~358) recover.
    snaps = probed_run(500, stall_end=330, wait_until=372, recent_until=333, worker_cpu=99.0)
    timeline = [f for f in Engine([starvation.STARVATION]).run(snaps) if f.device == 0]
    assert [(f.since - T0, f.until and f.until - T0) for f in timeline] == [(STALL, 333)]
    # the severity and the title are the 50-step share's
    assert timeline[0].severity == "critical" and "57 % of each step" in timeline[0].title
    # The same stall seen by a probe that does not publish the recent share: as before, the
    # finding lasts until the 50-step share recovers.
    old = probed_run(500, stall_end=330, wait_until=372, worker_cpu=99.0)
    assert [(f.since - T0, f.until and f.until - T0)
            for f in Engine([starvation.STARVATION]).run(old) if f.device == 0] == [(STALL, 372)]


def test_the_recent_share_ends_the_wait_but_never_sets_its_severity_or_title() -> None:
    def conds(frac: float, recent: float | None) -> list[tuple[str, str]]:
        return [(c.severity, c.title) for c in starvation.check(
            [tick(0, busy=97.0, n=1, probe=loop(frac, recent=recent))])]

    assert conds(0.3, 0.9) == conds(0.3, None) == conds(0.3, 0.06)
    assert conds(0.3, 0.9)[0][0] == "warning" and "30 % of each step" in conds(0.3, 0.9)[0][1]
    assert conds(0.3, 0.05) == [] and conds(0.3, 0.0) == []
    assert conds(0.02, 0.9) == []  # the 50-step share has to be above 5 % too


def test_a_probe_that_never_saw_a_wait_leaves_the_outside_view_alone() -> None:
    # The GPU idles while the loop does not wait on its loader (collectives, a host stall): the
    # probe's shares say nothing about the GPU's minute, so the outside view still flags it.
    snaps = [replace(s, processes=tuple(replace(p, probe=replace(loop(0.01, recent=0.01),
                                                                 ts=s.time))
                                        for p in s.processes))
             for s in starved_run(worker_cpu=99.0)]
    f = next(f for f in Engine([starvation.STARVATION]).run(snaps) if f.device == 0)
    assert "wait_frac" not in f.evidence and f.evidence["busy_pct"] < 70


def test_a_loop_waiting_on_network_storage_is_flagged_from_the_probe_alone() -> None:
    # NVML sees the GPU busy enough (75 %) and the workers idle with no I/O wait: outside-in
    # there is nothing to see, but the loop waits a quarter of each step for its data.
    snaps = [tick(t, busy=75.0, worker_cpu=4.0, probe=loop(0.25)) for t in range(200)]
    conds = starvation.check(snaps[:100])
    assert conds and not any("busy_pct" in c.evidence for c in conds)
    engine = Engine([starvation.STARVATION])
    assert opened(engine, snaps) == starvation.WAIT_FOR_S
    f = next(f for f in engine.open_findings() if f.device == 0)
    assert f.severity == "warning" and f.pid == 4242
    assert f.title == ("GPU0 starved: PID 4242 `train.py` waits on its DataLoader 25 % of each "
                       "step; idle loader, no I/O wait: slow storage?")
    assert "network storage" in f.cause and "33 ms step, 8 ms waiting" in f.cause
    assert "local NVMe" in f.fix and "prefetch_factor" in f.fix
    assert f.evidence["worker_cpu_pct"] == 4.0


def test_the_probes_share_sets_the_severity_and_2_percent_stays_quiet() -> None:
    def severity(frac: float) -> str | None:
        conds = starvation.check([tick(0, busy=97.0, n=1, probe=loop(frac))])
        return conds[0].severity if conds else None

    assert [severity(x) for x in (0.02, 0.04, 0.1, 0.3, 0.6)] == [
        None, None, "info", "warning", "critical"]
    assert Engine([starvation.STARVATION]).run(
        tick(t, busy=97.0, probe=loop(0.02)) for t in range(200)) == []


def test_a_probed_process_on_two_gpus_is_judged_once_on_its_home_gpu() -> None:
    def ranks(t: int) -> Snapshot:
        s = tick(t, busy=97.0, n=2, worker_cpu=4.0, probe=loop(0.3))
        small, large = s.processes  # one process: a context on GPU 0, its work on GPU 1
        return replace(s, processes=(replace(small, gpu_mem=GIB), replace(large, pid=4242)))

    conds = starvation.check([ranks(t) for t in range(90)])
    assert [(c.device, c.pid) for c in conds] == [(1, 4242)]


def test_a_checkpoint_that_writes_to_disk_is_not_a_loader_waiting_on_reads() -> None:
    # 60 s of torch.save: 2 s of device-to-host copies, then the GPU idle while the write keeps
    # the host's I/O pressure at 35 % and the loader's workers idle.
    io = HostSample(cpu_count=104, cpu_percent=10.0, cpu_percent_per_core=(10.0,) * 104,
                    iowait_percent=20.0, psi_io_some=35.0)
    snaps = []
    for t in range(300):
        if 120 <= t < 180:
            util = 100.0 if t < 122 else 0.0
            snaps.append(tick(t, busy=0.0, util=util, worker_cpu=0.0, host=io))
        else:
            snaps.append(tick(t, busy=97.0))
    assert Engine([starvation.STARVATION]).run(snaps) == []


def test_links_handed_again_keep_the_last_ticks_shares_and_new_links_are_summed() -> None:
    def links(rate: float) -> tuple[LinkSample, ...]:
        return tuple(LinkSample(device_index=i, link=k, kind="nvlink", up=True, speed=25e9,
                                rx=rate, tx=rate) for i in range(2) for k in range(18))

    first = links(5e9)
    a = replace(node(2, time=1000.0), links=first)
    b = replace(node(2, time=1001.0), links=tuple(first))  # the same links, a new tuple
    shares = starvation._link_shares(a)
    assert shares == starvation._sum_shares(first)
    assert {i: (round(t, 9), n) for i, (t, n) in shares.items()} == {0: (3.6, 18), 1: (3.6, 18)}
    assert starvation._link_shares(b) is shares  # not summed again
    c = replace(node(2, time=1002.0), links=links(5e9))  # read anew, equal values
    assert starvation._link_shares(c) == shares
    d = replace(node(2, time=1003.0), links=links(12.5e9))
    assert starvation._link_shares(d) == starvation._sum_shares(d.links) != shares
    assert starvation._link_shares(b) == shares  # an older tick again: its own links' sums
    assert starvation._link_shares(replace(d, links=())) == {}
