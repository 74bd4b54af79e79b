"""R5 `thermal.*` and R6 `power.cap`: clocks held down by heat, power delivery or a power limit.

docs/diagnostics.md §6 and §8 R5/R6. The cumulative clock-event counters (seconds per reason) say
how long each reason held the clock; the instantaneous bits are the fallback where the counters are
not offered. An idle GPU is never throttled, whatever its bits say: `gpu_idle` appears without a
CUDA context, and real idle cards at P8 report "SW Power Cap: Active" with the SM clock at 22 MHz
(nvidia-smi -q of an RTX 5090) or 0 MHz (three RTX A6000s). Power capping at full load is normal on
datacenter parts (§0.3), so it is reported only when someone lowered the limit, or the clocks fall
below what the cap alone gives.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputop.diagnose.types import Condition, Diagnostic
from gputop.diagnose.window import (
    bit_run,
    column,
    counter_growth,
    covers,
    device_at,
    devices,
    field_mean,
    field_values,
    last,
    median,
    number,
    reason_share,
)
from gputop.model import DeviceSample, Missing, Snapshot

WINDOW_S = 60.0  # R5 window
ACTIVE = 20.0  # R5 gate: util >= 20 % or GPM gract >= 20 %
SW_SHARE = 0.05  # R5 warning: SW thermal time > 5 % of the window ...
SW_FOR_S = 300.0  # ... for 5 min
MARGIN_HOT = 3.0  # R5 warning: margin <= 3 °C; hw.slowdown is thermal below it
MARGIN_NEAR = 10.0  # R5 info: margin <= 10 °C ...
NEAR_FOR_S = 300.0  # ... for 5 min with no throttling
BIT_TICKS = 2  # R5: a bit counts when seen in >= 2 consecutive ticks (0x8 also flickers on
# P-state changes, per the NVML header)
# One tick is enough where a HW bit holds the clocks at half their max or less: the NVML header
# defines the HW slowdowns as "reducing the core clocks by a factor of 2 or more", which a
# P-state flicker under load does not do. No load gate: a braked GPU cannot get busy (8 H100s in
# power brake read SM 86 of 1980 MHz), and the clock cut says it is not a GPU at rest.
FAR_BELOW = 0.5
# Whether a slowdown still happens is read over the last 6 s (the minute still gives the figures):
# the NVML source reads the time counters every 5 s slow tick, so 6 s holds two readings; with a
# 3 s clearing time a finding closes within 10 s of the clocks recovering.
HOLD_S = 6.0
CLEAR_S = 3.0

POWER_WINDOW_S = 300.0  # R6: a 5 min window
POWER_MIN_S = 60.0  # judged once a minute of it is there
# A limit below the default is a setting, not a state the clocks pass through: it is judged over
# the last 20 s, from 20 s of history on. A real H100 whose limit was lowered from 700 to 350 W
# made a third fewer training steps a second (fixtures/nvidia/h100-train/power_capped.jsonl.gz).
LOWERED_S = 20.0
CAP_SHARE = 0.5  # R6: SW power cap > 50 % of the window
CAP_CLOCK = 0.85  # R6: while SM clock < 85 % of max
# At its default limit, an H100 under dense bf16 GEMM held a median 1395 MHz and never went below
# 1170 of 1980 MHz (§0.3). Below that share the cap costs more than it normally does.
LOW_CLOCK = 1170 / 1980
LIMIT_TOLERANCE_W = 1.0  # limits are read to 10 mW; "lowered" means by more than rounding

THERMAL_FIX = ("Check airflow, fans and inlet temperature, blanking panels, neighbouring GPUs, "
               "dust and liquid-loop flow; if it persists on one GPU, open a hardware ticket.")
POWER_DELIVERY_FIX = ("Check PSU redundancy, BMC power capping and cabling; read the server's "
                      "event log.")
POWER_CAP_FIX = ("Restore the power limit (nvidia-smi -pl, as root) if the cap was unintended, or "
                 "accept it as a performance-per-watt choice.")


def check_thermal(window: Sequence[Snapshot]) -> list[Condition]:
    recent = last(window, WINDOW_S)
    if not recent:
        return []
    now = last(recent, HOLD_S)
    newest = recent[-1]
    out: list[Condition] = []
    for index in devices(recent):
        d = device_at(newest, index)
        if d is None:
            continue
        out += _moment(d)  # the engine keeps the worse of this and the window's, per id
        if not _calm(recent, index, d, now) and _active(recent, index):
            out += _thermal(recent, index, d, now)
    return out


# The clock-event reasons `_thermal` reads, by their bits and by their counters.
SLOWING = ("hw_thermal", "hw_power_brake", "hw_slowdown", "sw_thermal")
COUNTED = ("hw_thermal", "hw_power_brake", "sw_thermal")
NO_COUNTS = (None,) * len(COUNTED)
Slowing = tuple[tuple[str, ...], tuple[float | None, ...]]  # (bits set, counter readings)


def _calm(window: Sequence[Snapshot], index: int, d: DeviceSample,
          now: Sequence[Snapshot]) -> bool:
    """Whether `_thermal` finds nothing, told from what decides it on most ticks of most GPUs:
    the margin is far from the edge, no tick of the window has a slowdown bit or a change of a
    slowdown counter, and the last HOLD_S stayed below the slowdown temperature."""
    margin = _margin(d)
    if margin is not None and margin <= MARGIN_NEAR:
        return False
    facts = column(window, _slowing_at, index)
    if not facts or facts.count(facts[-1]) != len(facts) or (
            facts[-1] is not None and facts[-1][0]):
        return False
    slowdown = number(d.temp_slowdown)
    if slowdown is None:
        return True
    temps = field_values(now, index, "temp_gpu")
    return not temps or max(temps) < slowdown


def _slowing_at(s: Snapshot, index: int) -> Slowing | None:
    """The slowdown bits set at a tick and the readings of their counters; None where there are
    none of either (as at a tick where the GPU is lost: the rule reads nothing there)."""
    d = device_at(s, index)
    if d is None:
        return None
    bits = tuple(b for b in d.throttle if b in SLOWING) if isinstance(d.throttle, tuple) else ()
    tt = d.throttle_time
    counts = NO_COUNTS if isinstance(tt, Missing) else tuple(
        number(tt[r]) if r in tt else None for r in COUNTED)
    return None if not bits and counts == NO_COUNTS else (bits, counts)


def _moment(d: DeviceSample) -> list[Condition]:
    """What one tick says on its own: a HW slowdown bit with the clocks cut to half or less,
    or the driver's thermal slowdown. An `nvidia-smi -q` pasted into a ticket is one tick."""
    bits = d.throttle if isinstance(d.throttle, tuple) else ()
    clock, clock_max = number(d.clock_sm), number(d.clock_sm_max)
    gpu = f"GPU{d.index}"
    out = []
    # A GPU at rest (`gpu_idle`: no context) has low clocks of its own accord, and the NVML header
    # warns the HW slowdown bit "may be also reported during PState or clock change", which is
    # when it leaves that rest: its low clock is no cut.
    resting = "gpu_idle" in bits
    if not resting and clock is not None and clock_max and clock <= FAR_BELOW * clock_max:
        clocks = f"SM clock {clock:.0f} of {clock_max:.0f} MHz"
        evidence = {"clock_mhz": clock, "clock_max_mhz": clock_max}
        temp = number(d.temp_gpu)
        if temp is not None:
            evidence["temp_c"] = temp
        if "hw_thermal" in bits:
            out.append(Condition(
                id="thermal.hw", severity="critical", device=d.index,
                title=f"{gpu} HW thermal slowdown: {clocks}",
                cause=f"{gpu}'s HW thermal slowdown is active: the hardware cut its clocks to "
                      f"{clock / clock_max * 100:.0f} % of max to protect it from heat.",
                fix=THERMAL_FIX, evidence=evidence, score=-clock))
        if "hw_power_brake" in bits:
            out.append(Condition(
                id="power.brake", severity="critical", device=d.index,
                title=f"{gpu} HW power brake: {clocks}",
                cause=f"{gpu}'s external power brake is asserted (by the system's power supply "
                      f"or BMC): its clocks are cut to {clock / clock_max * 100:.0f} % of max.",
                fix=POWER_DELIVERY_FIX, evidence=evidence, score=-clock))
        if "hw_slowdown" in bits and not {"hw_thermal", "hw_power_brake"} & set(bits):
            margin = _margin(d)
            thermal = margin is not None and margin <= MARGIN_HOT
            why = f"heat (margin {margin:.0f} °C)" if thermal else \
                "power delivery (over-current / Fast Trigger), not heat"
            out.append(Condition(
                id="hw.slowdown", severity="critical", device=d.index,
                title=f"{gpu} HW slowdown: {clocks}; likely {why}",
                cause=f"{gpu}'s HW slowdown is active with neither the thermal nor the "
                      "power-brake reason: the hardware cut its clocks by half or more.",
                fix=THERMAL_FIX if thermal else POWER_DELIVERY_FIX, evidence=evidence,
                score=-clock))
    if "sw_thermal" in bits:
        temp = number(d.temp_gpu)
        temps = f", GPU {temp:.0f} °C" if temp is not None else ""
        clocks = f", SM clock {clock:.0f} of {clock_max:.0f} MHz" if clock and clock_max else ""
        out.append(Condition(
            id="thermal.sw", severity="warning", device=d.index,
            title=f"{gpu} thermal slowdown active{temps}{clocks}",
            cause=f"{gpu}'s SW thermal slowdown is active: the driver lowers its clocks to keep "
                  "it at or below its max operating temperature.",
            fix=THERMAL_FIX, evidence={k: v for k, v in (("temp_c", temp), ("clock_mhz", clock))
                                       if v is not None},
            for_s=0.0, score=-1000.0))  # the window's figures, where there are some, rank first
    return out


def _active(window: Sequence[Snapshot], index: int) -> bool:
    util = field_mean(window, index, "util_gpu")
    gr = field_mean(window, index, "gr_active")
    return any(v is not None and v >= ACTIVE for v in (util, gr))


def _counted(window: Sequence[Snapshot], index: int, reason: str) -> float | None:
    """Seconds a reason's counter grew over the window; None where there is no counter."""
    grown = counter_growth(window, index, reason)
    return grown[0] if grown is not None else None


def _held(window: Sequence[Snapshot], index: int, reason: str) -> float:
    """Seconds (counter) or ticks in a row (bits) the reason held: > 0 means it happened."""
    counted = _counted(window, index, reason)
    if counted is not None:
        return counted
    return 1.0 if bit_run(window, index, reason) >= BIT_TICKS else 0.0


def _margin(d: DeviceSample) -> float | None:
    """°C left below the max operating temperature, where the driver starts slowing (§0.6)."""
    m = number(d.temp_margin)
    if m is not None:
        return m
    tmax, temp = number(d.temp_max_operating), number(d.temp_gpu)
    return tmax - temp if tmax is not None and temp is not None else None


def _margin_at(s: Snapshot, index: int) -> float | None:
    d = device_at(s, index)
    return _margin(d) if d is not None else None


def _lowest_margin(window: Sequence[Snapshot], index: int) -> float | None:
    margins = column(window, _margin_at, index)
    return min(margins if None not in margins else [m for m in margins if m is not None],
               default=None)


def _thermal(window: Sequence[Snapshot], index: int, d: DeviceSample,
             now: Sequence[Snapshot] | None = None) -> list[Condition]:
    """What the window says of one GPU under load; `now` is its last HOLD_S."""
    if now is None:
        now = last(window, HOLD_S)
    # What decides, first: on most ticks of most GPUs nothing holds, and no text is built.
    slowdown = number(d.temp_slowdown)
    margin = _margin(d)
    hw_thermal = _held(now, index, "hw_thermal")
    brake = _held(now, index, "hw_power_brake")
    hot_now = max(field_values(now, index, "temp_gpu"), default=None)
    hot = slowdown is not None and hot_now is not None and hot_now >= slowdown
    bare = hw_thermal == 0 and brake == 0 and _bare_slowdown(now, index)
    sw_s = _counted(window, index, "sw_thermal")
    # The same counter reading as `sw_s` where there is one (counter_growth keeps it a tick).
    sw_share = reason_share(window, index, "sw_thermal") or 0.0
    at_edge = margin is not None and margin <= MARGIN_HOT
    # Active at the newest tick: what one tick says at once (`_moment`) is not held back here.
    now_on = isinstance(d.throttle, tuple) and "sw_thermal" in d.throttle
    still = now_on or (reason_share(now, index, "sw_thermal") or 0.0) > 0
    sw = (sw_share > SW_SHARE and still) or at_edge
    near = (margin is not None and margin <= MARGIN_NEAR and hw_thermal == 0
            and sw_share == 0)
    if not (hw_thermal > 0 or hot or brake > 0 or bare or sw or near):
        return []

    gpu = f"GPU{index}"
    # The window's peak: a postmortem wants how hot it got, and one tick at the slowdown
    # threshold is enough for the hardware to cut the clocks.
    temp = max(field_values(window, index, "temp_gpu"), default=None)
    clock = median(field_values(window, index, "clock_sm"))
    clock_max = number(d.clock_sm_max)
    clocks = f"clocks {clock:.0f}/{clock_max:.0f} MHz" if clock and clock_max else "clocks ?"
    temps = f"GPU {temp:.0f} °C" if temp is not None else "GPU temperature unknown"
    if slowdown is not None:
        temps += f" (slowdown {slowdown:.0f} °C)"
    if (tm := max(field_values(window, index, "temp_mem"), default=None)) is not None:
        temps += f", HBM {tm:.0f} °C"
    # Conditions read the margin now; the evidence, like the temperature, keeps the window's worst.
    lowest = _lowest_margin(window, index)
    evidence = {k: v for k, v in (("temp_c", temp), ("margin_c", lowest), ("clock_mhz", clock),
                                  ("clock_max_mhz", clock_max)) if v is not None}
    out = []
    if hw_thermal > 0 or hot:
        out.append(Condition(
            id="thermal.hw", severity="critical", device=index,
            title=f"{gpu} HW thermal slowdown: {clocks}, {temps}",
            cause=f"{gpu} reached its hardware slowdown: clocks are cut by half or more.",
            fix=THERMAL_FIX, evidence={**evidence, "hw_thermal_s": hw_thermal}))
    if brake > 0:
        out.append(Condition(
            id="power.brake", severity="critical", device=index,
            title=f"{gpu} HW power brake: {clocks}",
            cause=f"{gpu}'s clocks were cut by the external power brake signal.",
            fix=POWER_DELIVERY_FIX, evidence={**evidence, "hw_power_brake_s": brake}))
    if bare:
        thermal = margin is not None and margin <= MARGIN_HOT
        why = f"heat (margin {margin:.0f} °C)" if thermal else \
            "power delivery (over-current / Fast Trigger), not heat"
        out.append(Condition(
            id="hw.slowdown", severity="critical", device=index,
            title=f"{gpu} HW slowdown without a named reason: {clocks}; likely {why}",
            cause=f"{gpu}'s HW slowdown bit held for >= {BIT_TICKS} ticks under load with neither "
                  "the thermal nor the power-brake bit.",
            fix=THERMAL_FIX if thermal else POWER_DELIVERY_FIX, evidence=evidence))

    if sw_s is not None:
        evidence["sw_thermal_s"] = sw_s
    evidence["sw_thermal_share"] = sw_share
    if sw:
        limit = number(d.temp_max_operating)
        at = f" ({limit:.0f} °C)" if limit is not None else ""
        if lowest is None:
            where = "throttled by the driver's thermal slowdown"
        elif lowest <= 0:
            where = f"reached its max operating temperature{at}"
        else:
            where = f"came within {lowest:.0f} °C of its max operating temperature{at}"
        out.append(Condition(
            id="thermal.sw", severity="warning", device=index,
            title=f"{gpu} thermal slowdown: {temps}, {clocks}, SW thermal "
                  f"{sw_share * 100:.0f} % of the last minute",
            cause=f"{gpu} {where}: the driver lowers its clocks to hold it there.",
            fix=THERMAL_FIX, evidence=evidence, for_s=0.0 if at_edge or now_on else SW_FOR_S,
            score=sw_share * 100 - (lowest if lowest is not None else 0.0)))
    elif near:
        assert margin is not None
        out.append(Condition(
            id="thermal.near", severity="info", device=index,
            title=f"{gpu} runs {margin:.0f} °C below its thermal slowdown ({temps})",
            cause=f"{gpu} is close to the temperature where the driver starts lowering clocks.",
            fix=THERMAL_FIX, evidence=evidence, for_s=NEAR_FOR_S, score=-margin))
    return out


def _bare_slowdown(window: Sequence[Snapshot], index: int) -> bool:
    run = 0
    for bare in column(window, _bare_at, index):
        run = run + 1 if bare else 0
        if run >= BIT_TICKS:
            return True
    return False


def _bare_at(s: Snapshot, index: int) -> bool:
    """The HW slowdown bit under load without the thermal or power-brake bit."""
    d = device_at(s, index)
    bits = d.throttle if d is not None and isinstance(d.throttle, tuple) else ()
    if "hw_slowdown" not in bits or "hw_thermal" in bits or "hw_power_brake" in bits:
        return False
    busy = max((number(d.util_gpu) or 0.0, number(d.gr_active) or 0.0)) if d else 0.0
    return busy >= ACTIVE


def check_power(window: Sequence[Snapshot]) -> list[Condition]:
    if not covers(window, LOWERED_S, 1.0):
        return []
    judged = covers(window, POWER_MIN_S, 1.0)  # at the default limit, from a minute on
    recent = last(window, LOWERED_S)
    out = []
    newest = window[-1]
    for index in devices(window):
        d = device_at(newest, index)
        if d is None:
            continue
        limit, default = number(d.power_limit), number(d.power_default_limit)
        lowered = limit is not None and default is not None and \
            limit < default - LIMIT_TOLERANCE_W
        if not lowered and not judged:
            continue
        span = recent if lowered else window
        if not _active(span, index):
            continue
        share = reason_share(span, index, "sw_power_cap")
        clock_max = number(d.clock_sm_max)
        if share is None or share <= CAP_SHARE or not clock_max:
            continue
        clock = _capped_clock(span, index)
        if clock is None:
            continue
        ratio = clock / clock_max
        if ratio >= CAP_CLOCK:
            continue
        draw = field_mean(span, index, "power_draw")
        evidence = {k: v for k, v in (("cap_share", share), ("clock_mhz", clock),
                                      ("clock_max_mhz", clock_max), ("power_limit_w", limit),
                                      ("power_default_limit_w", default), ("power_w", draw))
                    if v is not None}
        gpu = f"GPU{index}"
        clocks = f"clocks {clock:.0f}/{clock_max:.0f} MHz"
        if lowered:
            out.append(Condition(
                id="power.cap", severity="warning", device=index,
                title=f"{gpu} power limit lowered to {limit:.0f} W (default {default:.0f} W): "
                      f"{clocks}",
                cause=f"{gpu} was held by its power limit {share * 100:.0f} % of the time and its "
                      "enforced limit is below the default (set by nvidia-smi -pl or out of "
                      "band by the BMC).",
                fix=POWER_CAP_FIX, evidence=evidence))
        elif ratio < LOW_CLOCK:
            at = f" at {limit:.0f} W" if limit is not None else ""
            out.append(Condition(
                id="power.cap", severity="info", device=index,
                title=f"{gpu} power-limited{at} with low clocks: {clocks}",
                cause=f"{gpu} was held by its power limit {share * 100:.0f} % of the time, with "
                      "clocks below what the cap normally gives under dense math.",
                fix=POWER_CAP_FIX, evidence=evidence))
    return out


def _capped_clock(window: Sequence[Snapshot], index: int) -> float | None:
    """Median SM clock at the ticks the power cap held it, else over the window."""
    capped = [c for c in column(window, _capped_at, index) if c is not None]
    return median(capped) or median(field_values(window, index, "clock_sm"))


def _capped_at(s: Snapshot, index: int) -> float | None:
    """The SM clock at a tick where the power cap held it."""
    d = device_at(s, index)
    if d is not None and isinstance(d.throttle, tuple) and "sw_power_cap" in d.throttle:
        return number(d.clock_sm)
    return None


THERMAL = Diagnostic(name="thermal", check=check_thermal, window_s=WINDOW_S, for_s=0.0,
                     clear_s=CLEAR_S, every_s=1.0)
POWER = Diagnostic(name="power", check=check_power, window_s=POWER_WINDOW_S, for_s=0.0,
                   clear_s=WINDOW_S)
