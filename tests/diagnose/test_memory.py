"""mem.growth (a leak, with its time to OOM) and mem.pressure."""

from __future__ import annotations

from dataclasses import replace

from gputop.diagnose import Engine
from gputop.diagnose.rules import memory
from gputop.model import ProcessSample, Snapshot
from gputop.testing.synthetic import GIB, H100_RESERVED, H100_TOTAL, node

T0 = 1_800_000_000.0
MiB = 1 << 20


def tick(t: float, gpu_mem: int, *, born: float = T0 - 3600) -> Snapshot:
    """One H100 whose only process holds `gpu_mem`; device numbers follow."""
    s = node(1, time=T0 + t, mem_used=gpu_mem)
    p = ProcessSample(pid=4242, device_index=0, gpu_mem=gpu_mem, sm_util=80.0, name="python3",
                      cmdline=("python3", "train.py"), create_time=born)
    return replace(s, processes=(p,))


def test_a_memory_leak_gives_a_time_to_oom() -> None:
    # Flat at 62 GiB, then leaking 40 MiB/s (in 20 MiB chunks, as an allocator grows) from t=100.
    snaps = [tick(t, 62 * GIB + (20 * MiB * ((t - 100) * 2) if t >= 100 else 0))
             for t in range(220)]
    engine = Engine([memory.GROWTH])
    opened = next(s.time - T0 for s in snaps if engine.update(s))
    assert 100 < opened <= 100 + 60 + memory.GROWTH_FOR_S + 5
    (f,) = engine.open_findings()
    assert (f.id, f.device, f.pid, f.severity) == ("mem.growth", 0, 4242, "warning")
    assert abs(f.evidence["rate_mib_s"] - 40) < 1
    free = (H100_TOTAL - H100_RESERVED - f.evidence["used_gib"] * GIB) / MiB
    assert abs(f.evidence["time_to_oom_s"] - free / 40) < 0.05 * free / 40
    assert "grows 40 MiB/s: out of memory in ~" in f.title and "PID 4242" in f.title
    assert ".detach()" in f.fix


def test_a_leak_minutes_from_oom_is_critical() -> None:
    # Too slow for the short projection (100 MiB in 10 s), minutes from full.
    snaps = [tick(t, 76 * GIB + 10 * MiB * t) for t in range(90)]
    (c,) = memory.check_growth(snaps)
    assert c.severity == "critical" and c.evidence["time_to_oom_s"] < memory.CRITICAL_TTO_S


def test_a_fast_leak_is_named_well_before_out_of_memory_even_in_its_first_minute() -> None:
    # ~0.9 GiB/s from 3 GiB on a training GPU, from the process's start: full in about 85 s.
    rate = int(0.9 * GIB)
    snaps = [tick(t / 2, 3 * GIB + rate * t // 2, born=T0) for t in range(200)]
    free0 = (H100_TOTAL - H100_RESERVED - 3 * GIB) / rate
    engine = Engine([memory.GROWTH, memory.OOM_SOON])
    seen: dict[str, float] = {}
    for s in snaps:
        for f in engine.update(s):
            seen.setdefault(f.severity, s.time - T0)
        if s.time - T0 >= free0:
            break
    assert seen["warning"] <= 20 < free0 - 40  # named at once, a minute before it is full
    assert seen["critical"] <= free0 - 55  # and critical once under a minute is left
    (f,) = engine.open_findings()
    assert (f.id, f.pid) == ("mem.oom_soon", 4242) and "GiB/s: out of memory in ~" in f.title


def test_the_oom_projection_clears_when_the_growth_stops() -> None:
    rate = int(0.9 * GIB)
    snaps = [tick(t, 3 * GIB + rate * min(t, 40)) for t in range(80)]
    engine = Engine([memory.OOM_SOON])
    shown = [s.time - T0 for s in snaps if engine.update(s)]
    assert shown and shown[0] <= 15 and 40 < shown[-1] <= 50


def test_a_load_that_stops_short_of_full_or_allocator_steps_raise_no_projection() -> None:
    # Weights loaded at 1 GiB/s for 14 s with the GPU idle, then steps of the caching allocator.
    def at(t: int) -> Snapshot:
        s = tick(t, 3 * GIB + GIB * min(t, 14) + (2 * GIB if t >= 40 else 0)
                 + (6 * GIB if t >= 70 else 0), born=T0)
        busy = 0.0 if t < 14 else 95.0
        return replace(s, devices=(replace(s.devices[0], util_gpu=busy, gr_active=busy),))
    assert Engine([memory.OOM_SOON, memory.GROWTH]).run([at(t) for t in range(200)]) == []


def test_a_first_minute_of_allocator_jumps_is_not_a_leak() -> None:
    # Sampled at 2 Hz, a job's allocator takes 3 GiB every 3 s for 18 s as its first steps
    # (optimizer state, activations of growing lengths) arrive, then holds: a line fits the jumps,
    # but the memory rises at one sample in six.
    def at(k: int) -> Snapshot:
        t = k / 2
        s = tick(t, 10 * GIB + 3 * GIB * min(6, int(t // 3)), born=T0)
        return replace(s, devices=(replace(s.devices[0], util_gpu=95.0, gr_active=95.0),))
    assert Engine([memory.OOM_SOON]).run([at(k) for k in range(120)]) == []


def test_the_allocator_growing_once_is_not_a_leak() -> None:
    # A single 4 GiB step (a longer sequence arrived once), flat on both sides.
    snaps = [tick(t, 60 * GIB + (4 * GIB if t >= 150 else 0)) for t in range(400)]
    assert Engine([memory.GROWTH]).run(snaps) == []


def test_loading_the_model_at_start_up_is_not_a_leak() -> None:
    # 50 GiB of weights and optimizer state over the first 75 s of the process's life.
    snaps = [tick(t, int(min(t, 75) / 75 * 50 * GIB), born=T0) for t in range(200)]
    assert Engine([memory.GROWTH]).run(snaps) == []


def test_a_slow_leak_shows_over_ten_minutes() -> None:
    snaps = [tick(t, 40 * GIB + 2 * MiB * t) for t in range(0, 700, 5)]
    (c,) = memory.check_growth(snaps)
    assert c.evidence["fit_span_s"] > 400 and abs(c.evidence["rate_mib_s"] - 2) < 0.1


def test_a_nearly_full_gpu_still_filling_is_under_memory_pressure_after_a_minute() -> None:
    used = int(0.97 * H100_TOTAL) - H100_RESERVED
    snaps = [tick(t, used - 2 * GIB + min(t, 60) * GIB // 30) for t in range(150)]
    found = Engine([memory.PRESSURE]).run(snaps)
    assert [(f.id, f.severity) for f in found] == [("mem.pressure", "warning")]
    assert "97 % full" in found[0].title


def test_a_card_held_full_and_flat_is_a_pool_not_pressure() -> None:
    # A real V100 job (tests/data/realdata, aicloud docs) ran at a flat 95 % for its whole log:
    # frameworks that take the card up front look like this.
    used = int(0.97 * H100_TOTAL) - H100_RESERVED
    assert Engine([memory.PRESSURE]).run([tick(t, used) for t in range(150)]) == []
