"""R5 thermal and R6 power cap; and the healthy and idle cards that must stay quiet."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gputop.diagnose import Engine, default_engine
from gputop.diagnose.rules import BUILTIN, throttle
from gputop.diagnose.window import History, last
from gputop.importers.nvsmi_xml import parse_nvsmi_xml
from gputop.model import (
    ChildProcess,
    DeviceSample,
    HostSample,
    JobInfo,
    Missing,
    ProcessSample,
    Snapshot,
)
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
REALDATA = Path(__file__).resolve().parents[1] / "data" / "realdata" / "nvidia-smi-xml"
COUNTERS = ("sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake")


def counters(t: float, **per_second: float) -> dict[str, float]:
    """Cumulative clock-event seconds after `t` s at the given rates (a base from before)."""
    return {r: 1000.0 * (r == "sw_power_cap") + per_second.get(r, 0.0) * t for r in COUNTERS}


def trainer(i: int) -> ProcessSample:
    return ProcessSample(
        pid=5000 + i, device_index=i, gpu_mem=62 * GIB, sm_util=75.0, user="ml", name="python3",
        cmdline=("python3", "train.py", f"--local_rank={i}"), cpu_percent=101.0,
        create_time=T0 - 3600, job=JobInfo(slurm_job_id="9"),
        children=tuple(ChildProcess(7000 + 10 * i + k, "pt_data_worker", 60.0, 2 * GIB)
                       for k in range(6)))


def healthy(t: int, n: int = 8, **over: Any) -> Snapshot:
    """A dense-math training tick as measured on an H100: 97 % busy, 700 W cap, ~1395 MHz."""
    fields: dict[str, Any] = dict(
        util_gpu=97.0 + t % 3, gr_active=96.0, clock_sm=(1350, 1395, 1425, 1515)[t % 4],
        power_draw=690.0 + t % 10, throttle=("sw_power_cap",), temp_gpu=65.0, temp_margin=22.0,
        throttle_time=counters(t, sw_power_cap=0.88))
    s = node(n, time=T0 + t, links=18, **{**fields, **over})
    return replace(s, processes=tuple(trainer(i) for i in range(n)),
                   host=HostSample(cpu_count=104, cpu_percent=40.0,
                                   cpu_percent_per_core=(40.0,) * 104, iowait_percent=0.3,
                                   psi_io_some=0.2))


def with_gpu(s: Snapshot, index: int, **over: Any) -> Snapshot:
    devs = tuple(replace(d, **over) if d.index == index else d for d in s.devices)
    return replace(s, devices=devs)


def test_a_healthy_steady_run_at_97_percent_with_sw_power_cap_stays_quiet() -> None:
    assert default_engine(plugins=False).run([healthy(t) for t in range(700)]) == []


def idle_series(dev: DeviceSample, seconds: int = 400, **over: Any) -> list[Snapshot]:
    base = node(1, processes=False)
    return [replace(base, time=T0 + t, devices=(replace(dev, **over, throttle_time=counters(
        t, sw_power_cap=1.0)),)) for t in range(seconds)]


@pytest.mark.parametrize("name, clock, clock_max, watts, limit", [
    # nvidia-smi -q of idle cards at P8, 0 % util, "SW Power Cap: Active", "Idle: Not Active":
    ("NVIDIA GeForce RTX 5090", 22, 3090, 24.05, 575.0),  # driver 570
    ("NVIDIA RTX A6000", 0, 2100, 23.29, 300.0),  # driver 550, three of nine GPUs
])
def test_an_idle_card_with_sw_power_cap_at_p8_stays_quiet(
        name: str, clock: int, clock_max: int, watts: float, limit: float) -> None:
    gpu = replace(node(1, processes=False).devices[0], name=name, util_gpu=0.0, gr_active=0.0,
                  sm_active=0.0, pstate=8, clock_sm=clock, clock_sm_max=clock_max,
                  throttle=("sw_power_cap",), power_draw=watts, power_limit=limit,
                  power_default_limit=limit, temp_gpu=28.0, temp_margin=59.0, pcie_gen=1)
    assert Engine(BUILTIN).run(idle_series(gpu)) == []


def test_an_idle_card_with_gpu_idle_and_a_lowered_power_limit_stays_quiet() -> None:
    # An idle RTX 3090 (nvidia-smi -q -x, driver 525): gpu_idle at P8, limit 200 W of a default
    # 350 W, SM clock at the 210 MHz idle floor of its generation. A lowered limit matters only
    # when the card works.
    gpu = replace(node(1, processes=False).devices[0], name="NVIDIA GeForce RTX 3090",
                  util_gpu=0.0, gr_active=0.0, pstate=8, clock_sm=210, clock_sm_max=2100,
                  throttle=("gpu_idle", "sw_power_cap"), power_limit=200.0,
                  power_default_limit=350.0)
    assert Engine(BUILTIN).run(idle_series(gpu)) == []


def test_a_real_idle_rtx_4000_ada_with_a_growing_power_cap_counter_stays_quiet() -> None:
    xml = (REALDATA / "rtx-4000-sff-ada_x1_drv595_schema-v13_telegraf.xml").read_text()
    gpu = parse_nvsmi_xml(xml).devices[0]
    assert "gpu_idle" in gpu.throttle and gpu.throttle_time["sw_power_cap"] > 4000  # type: ignore[index,operator]
    assert Engine(BUILTIN).run(idle_series(gpu)) == []


def hot_gpu5(seconds: int = 300, start: int = 120, margin: float = 0.0,
             sw_rate: float = 0.95) -> list[Snapshot]:
    out = []
    for t in range(seconds):
        s = healthy(t)
        if t >= start:
            tt = counters(t, sw_power_cap=0.88)
            tt["sw_thermal"] = sw_rate * (t - start)
            s = with_gpu(s, 5, temp_gpu=87.0 - margin, temp_margin=margin, clock_sm=1110,
                         throttle=("sw_thermal",), throttle_time=tt, temp_mem=75.0)
        out.append(s)
    return out


def test_gpu5_thermal_throttling_is_flagged_with_its_margin_and_counter_growth() -> None:
    engine = Engine([throttle.THERMAL])
    first = None
    for s in hot_gpu5():
        if engine.update(s) and first is None:
            first = s.time - T0
    assert first is not None and 120 <= first <= 120 + throttle.THERMAL.every_s
    (f,) = engine.open_findings()
    assert (f.id, f.device, f.severity) == ("thermal.sw", 5, "warning")
    assert f.evidence["margin_c"] == 0 and f.evidence["temp_c"] == 87
    assert f.evidence["sw_thermal_s"] > 50 and f.evidence["sw_thermal_share"] > 0.9
    assert "reached its max operating temperature (87 °C)" in f.cause
    assert "GPU5" in f.title and "1110/1980 MHz" in f.title and "SW thermal 9" in f.title
    assert "airflow" in f.fix


def test_sw_thermal_time_alone_needs_five_minutes() -> None:
    snaps = hot_gpu5(seconds=600, start=60, margin=6.0, sw_rate=0.3)
    found = Engine([throttle.THERMAL]).run(snaps)
    assert [(f.id, f.device) for f in found] == [("thermal.sw", 5)]
    # The counter share passes 5 % a few seconds in; the finding starts there but opens 5 min on.
    assert found[0].since - T0 < 80


def test_hw_thermal_is_critical_at_once() -> None:
    snaps = [healthy(t) for t in range(30)]
    tt = counters(30, sw_power_cap=0.88)
    tt["hw_thermal"] = 0.4
    snaps.append(with_gpu(healthy(30), 3, throttle_time=tt, throttle=("hw_slowdown", "hw_thermal"),
                          temp_gpu=90.0, temp_margin=-3.0))
    conds = throttle.check_thermal(snaps)
    hw = [c for c in conds if c.id == "thermal.hw"]
    assert [(c.device, c.severity) for c in hw] == [(3, "critical")]
    assert "GPU 90 °C (slowdown 89 °C)" in hw[0].title


def test_hw_slowdown_without_a_named_reason_points_at_power_delivery() -> None:
    snaps = [with_gpu(healthy(t), 1, throttle=("hw_slowdown",), clock_sm=700) if t >= 27
             else healthy(t) for t in range(30)]
    found = [c for c in throttle.check_thermal(snaps) if c.id == "hw.slowdown"]
    assert found and all(c.device == 1 and c.severity == "critical" for c in found)
    assert all("power delivery" in c.title and "PSU" in c.fix for c in found)


def test_a_single_tick_of_hw_slowdown_is_not_enough() -> None:
    snaps = [with_gpu(healthy(t), 1, throttle=("hw_slowdown",)) if t == 28 else healthy(t)
             for t in range(30)]
    assert throttle.check_thermal(snaps) == []


def test_a_lowered_power_limit_that_holds_clocks_down_is_a_warning() -> None:
    snaps = [healthy(t, power_limit=400.0, power_draw=399.0, clock_sm=1100) for t in range(120)]
    conds = throttle.check_power(snaps)
    assert {c.device for c in conds} == set(range(8))
    c = conds[0]
    assert c.severity == "warning" and c.id == "power.cap"
    assert "lowered to 400 W (default 700 W)" in c.title and "1100/1980 MHz" in c.title
    assert "nvidia-smi -pl" in c.fix


def test_power_capped_with_clocks_below_the_measured_range_is_info() -> None:
    snaps = [healthy(t, clock_sm=1005) for t in range(120)]
    conds = throttle.check_power(snaps)
    assert conds and all(c.severity == "info" for c in conds)
    assert "power-limited at 700 W with low clocks" in conds[0].title


def test_power_cap_at_the_default_limit_is_judged_only_after_a_minute() -> None:
    snaps = [healthy(t, clock_sm=1005) for t in range(50)]
    assert throttle.check_power(snaps) == []


def test_a_lowered_power_limit_is_judged_over_the_last_20_s() -> None:
    # A minute below the cap, then the limit lowered to 400 W and the cap holding the clocks 88 %
    # of the time at 1100 MHz: named once it held them over half of the last 20 s, not half of
    # the whole window.
    def tick(t: int) -> Snapshot:
        if t < 60:
            return healthy(t, throttle=(), throttle_time=counters(t))
        capped = counters(t)
        capped["sw_power_cap"] += 0.88 * (t - 60)
        return healthy(t, power_limit=400.0, clock_sm=1100, throttle_time=capped)

    snaps = [tick(t) for t in range(80)]
    assert throttle.check_power(snaps[:68]) == []  # 7 s of 20 capped
    (c, *_) = throttle.check_power(snaps[:74])  # 13 s of 20
    assert c.severity == "warning" and "lowered to 400 W (default 700 W)" in c.title
    assert "1100/1980 MHz" in c.title and c.evidence["cap_share"] > 0.5
    lowered = [healthy(t, power_limit=400.0, clock_sm=1100) for t in range(21)]
    assert throttle.check_power(lowered[:19]) == []  # less than 20 s of history
    assert throttle.check_power(lowered)


def test_the_thermal_check_passes_over_a_gpu_only_where_its_full_reading_finds_nothing() -> None:
    """The shortcut that spares most GPUs most ticks (`_calm`) says "nothing" only where the full
    reading of the window (`_thermal`) finds nothing, over windows with slowdown bits, counters
    that grow, hold, reset or are missing, margins and temperatures either side of the edges,
    and a lost tick."""
    rng = random.Random(7)
    reasons = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
    seen = {True: 0, False: 0}
    found_by_full = 0
    for _ in range(200):
        p_bit = rng.choice((0.0, 0.0, 0.0, 0.03, 0.3))
        counting = rng.choice(("hold", "hold", "hold", "grow", "reset", "missing"))
        grows = rng.choice(("sw_thermal", "hw_thermal", "hw_power_brake", "sw_power_cap"))
        margin = rng.choice((30.0, 30.0, 30.0, 11.0, 10.0, 4.0, -1.0))
        peak = rng.choice((70.0, 70.0, 88.0, 89.0))
        lost = rng.random() < 0.1
        history = History()
        for t in range(70):
            bits = tuple(r for r in reasons if rng.random() < p_bit)
            tt: Any = counters(t, **{grows: 0.5 if counting == "grow" else 0.0})
            if counting == "reset" and t > 50:
                tt = {r: v / 4 for r, v in tt.items()}
            if counting == "missing" or (counting == "hold" and t == 3):
                tt = Missing("unsupported")
            s = healthy(t, n=1, throttle=bits, throttle_time=tt, temp_margin=margin,
                        temp_gpu=peak if t == 66 else 60.0 + t % 5)
            if lost and t == 40:
                s = with_gpu(s, 0, lost=Missing("gpu_lost"))
            history.append(s)
        window = history.since(T0 + 10)
        for w in (window, list(window)):
            now = last(w, throttle.HOLD_S)
            d = w[-1].devices[0]
            calm = throttle._calm(w, 0, d, now)
            full = throttle._thermal(w, 0, d, now)
            assert not (calm and full), (p_bit, counting, grows, margin, peak, lost)
            seen[calm] += 1
            found_by_full += bool(full)
    assert seen[True] > 50 and seen[False] > 50 and found_by_full > 50
