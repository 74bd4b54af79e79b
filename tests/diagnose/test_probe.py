"""mem.fragmentation and mem.headroom: what the in-process probe tells the rules about memory.
(Its loader wait is evidence of loader.starvation: tests/diagnose/test_starvation.py.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gputop.diagnose import Engine
from gputop.diagnose.rules import BUILTIN, probe
from gputop.model import ProbeStats, ProcessSample, Snapshot
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
PID = 4242


def tick(t: float, stats: ProbeStats | None, *, gpu_mem: int = 60 * GIB,
         others: tuple[ProcessSample, ...] = (), **device: Any) -> Snapshot:
    """One H100 at T0 + t whose process 4242 `train.py` publishes `stats` (stamped at the tick)."""
    s = node(1, time=T0 + t, mem_used=gpu_mem, **device)
    p = ProcessSample(pid=PID, device_index=0, gpu_mem=gpu_mem, sm_util=60.0, name="python3",
                      cmdline=("python3", "train.py"), create_time=T0 - 3600,
                      probe=replace(stats, ts=T0 + t) if stats is not None else None)
    return replace(s, processes=(p, *others))


# -- mem.fragmentation ------------------------------------------------------------------------


def allocator(alloc_gib: float, reserved_gib: float, *, retries: int = 0, ooms: int = 0,
              conf: str | None = None) -> ProbeStats:
    a, r = int(alloc_gib * GIB), int(reserved_gib * GIB)
    return ProbeStats(ts=0.0, device=0, allocated=a, reserved=r, active=a, inactive_split=0,
                      peak_allocated=a, peak_reserved=r, num_alloc_retries=retries,
                      num_ooms=ooms, allocator_conf=conf, steps=1000, step_time_s=0.2,
                      wait_frac=0.0)


def fragmented(conf: str | None) -> list[Snapshot]:
    # 55.8 of 71.5 GiB reserved is allocated at the peak (22 % cached but unallocated), and the
    # allocator flushes its cache twice during the window.
    return [tick(t, allocator(55.8, 71.5, retries=t // 100, conf=conf), gpu_mem=72 * GIB)
            for t in range(0, 301, 5)]


def test_fragmentation_with_retries_suggests_expandable_segments() -> None:
    engine = Engine([probe.FRAGMENTATION])
    engine.run(fragmented(None))
    (f,) = engine.open_findings()
    assert (f.id, f.device, f.pid) == ("mem.fragmentation", 0, PID)
    assert f.severity == "warning"  # retries, 84 % of the GPU: below the critical 90 %
    assert abs(f.evidence["frag_ratio"] - 0.22) < 0.01
    assert f.evidence["alloc_retries"] == 3
    assert "15.7 GiB (22 %) of the 71.5 GiB reserved by PyTorch is cached" in f.title
    assert "allocator retries" in f.title
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in f.fix


def test_fragmentation_under_expandable_segments_suggests_something_else() -> None:
    (c,) = probe.check_fragmentation(fragmented("expandable_segments:True,max_split_size_mb:0"))
    assert "already on" in c.fix and "max_split_size_mb" in c.fix
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments" not in c.fix
    assert "empty_cache() does not fix" in c.fix


def test_retries_fire_at_once_and_a_ratio_alone_waits_five_minutes() -> None:
    # 40 of 52 GiB reserved is allocated: 23 % cached, the GPU 65 % full.
    retrying = [tick(t, allocator(40, 52, retries=t // 100), gpu_mem=53 * GIB)
                for t in range(0, 301, 5)]
    engine = Engine([probe.FRAGMENTATION])
    opened = next(s.time - T0 for s in retrying if engine.update(s))
    assert opened == 100  # the first retry
    calm = [tick(t, allocator(40, 52), gpu_mem=53 * GIB) for t in range(0, 400, 5)]
    engine = Engine([probe.FRAGMENTATION])
    opened = next(s.time - T0 for s in calm if engine.update(s))
    assert opened >= probe.FRAG_FOR_S


def test_nearly_full_and_fragmented_is_shown_within_30_seconds() -> None:
    # Batch 150 under the default allocator (docs/diagnostics.md §4.2): 62.77 GiB allocated, 71.48
    # reserved at the peak; the next larger batch ran out of memory.
    near = [tick(t, allocator(62.77, 71.48), gpu_mem=72 * GIB) for t in range(0, 100, 5)]
    engine = Engine([probe.FRAGMENTATION])
    opened = next(s.time - T0 for s in near if engine.update(s))
    assert opened == probe.FULL_FOR_S
    (f,) = engine.open_findings()
    assert f.severity == "warning" and "12 %" in f.title


def test_an_oom_is_critical_and_a_tidy_allocator_is_quiet() -> None:
    ooming = [tick(t, allocator(70, 75, ooms=t // 50)) for t in range(0, 100, 5)]
    assert probe.check_fragmentation(ooming)[0].severity == "critical"
    tidy = [tick(t, allocator(66, 70)) for t in range(0, 100, 5)]  # 6 %, as fits measured
    assert probe.check_fragmentation(tidy) == []


# -- mem.headroom -----------------------------------------------------------------------------

# docs/diagnostics.md §7.1, measured on an H100: alpha 2.60 GiB, beta 0.391 GiB per sample, reserved
# peaks 1.13x the allocated ones, 0.75 GiB outside the allocator, 79.18 GiB of device memory.
ALPHA, BETA, PHI, NONALLOC, TOTAL = 2.60, 0.391, 1.13, 0.75, 79.18


def measured(batches: tuple[int, ...] = (2, 4, 8, 16, 88, 88)) -> ProbeStats:
    pairs = tuple((b, int((ALPHA + BETA * b) * GIB)) for b in batches)
    peak = pairs[-1][1]
    return ProbeStats(ts=0.0, device=0, allocated=int(2.15 * GIB), reserved=int(peak * PHI),
                      peak_allocated=peak, peak_reserved=int(peak * PHI), num_alloc_retries=0,
                      num_ooms=0, steps=400, step_time_s=0.3, wait_frac=0.0,
                      batch_sizes=pairs)


def headroom(stats: ProbeStats | None, **device: Any) -> list[Any]:
    reserved = stats.reserved if stats is not None and stats.reserved is not None else 0
    gpu_mem = reserved + int(NONALLOC * GIB)
    device.setdefault("gr_active", 60.0)
    snaps = [tick(t, stats, gpu_mem=gpu_mem, mem_total=int(TOTAL * GIB), **device)
             for t in range(0, 60, 5)]
    return probe.check_headroom(snaps)


def test_headroom_from_the_measured_numbers_suggests_136() -> None:
    (c,) = headroom(measured())
    assert (c.id, c.severity, c.pid) == ("mem.headroom", "info", PID)
    assert 152 <= c.evidence["b_max"] <= 153
    assert abs(c.evidence["suggest"] - 136) <= 2
    assert abs(c.evidence["alpha_gib"] - ALPHA) < 0.01 and abs(c.evidence["beta_gib"] - BETA) < 1e-3
    assert abs(c.evidence["phi"] - PHI) < 0.01
    assert "at batch 88" in c.title and "try 136" in c.title and "estimate" in c.title
    assert "An estimate" in c.cause


def test_headroom_through_the_engine_opens_an_info_finding() -> None:
    stats = measured()
    gpu_mem = int(stats.reserved or 0) + int(NONALLOC * GIB)
    snaps = [tick(t, stats, gpu_mem=gpu_mem, mem_total=int(TOTAL * GIB), gr_active=60.0)
             for t in range(0, 30, 5)]
    (f,) = Engine([probe.HEADROOM]).run(snaps)
    assert f.id == "mem.headroom" and f.severity == "info" and f.open


def test_one_batch_size_gives_a_conservative_bound() -> None:
    (c,) = headroom(measured((88, 88, 88)))
    # beta from (peak - allocated between steps) / batch: larger than the fitted one
    assert c.evidence["beta_gib"] > BETA
    assert c.evidence["b_max"] < 153 and "one batch size" in c.cause


def test_no_probe_no_headroom() -> None:
    assert headroom(None) == []


def test_a_saturated_gpu_or_a_batch_near_its_limit_gets_no_suggestion() -> None:
    assert headroom(measured(), gr_active=97.0) == []
    assert headroom(measured((2, 4, 8, 16, 140, 140))) == []  # 153 / 140 < 1.25


def test_probe_rules_are_built_in_and_quiet_without_a_probe() -> None:
    names = {d.name for d in BUILTIN}
    assert {"mem.fragmentation", "mem.headroom"} <= names
    assert "loader.wait" not in names  # the probe's wait is one view of loader.starvation
    plain = [replace(node(1, time=T0 + t), processes=(ProcessSample(pid=PID, device_index=0,
                                                                    gpu_mem=70 * GIB),))
             for t in range(0, 400, 5)]
    for rule in (probe.FRAGMENTATION, probe.HEADROOM):
        assert Engine([rule]).run(plain) == []
