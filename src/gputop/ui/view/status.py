"""What a GPU's state means at a glance: badges with a word, a glyph and a severity.

Colour is never the only signal: every badge carries a word ("PWR CAP", "▲ HOT", "LOST"), and
the severity picks the colour. Classes follow docs/diagnostics.md §6 (and §0.3, §0.4):
gpu_idle is not throttling, sw_power_cap is normal under load (info), thermal and hardware
slowdowns are warnings or worse.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model import DeviceSample, Missing, value

# Glyphs that common terminal fonts have (the heavy ✖ is often missing).
CROSS = "\u00d7"  # multiplication sign: failed, lost
INFO = "info"
WARNING = "warning"
CRITICAL = "critical"
_RANK = {INFO: 0, WARNING: 1, CRITICAL: 2}

# Reasons that say nothing about the health or the speed of the job are not shown on the card:
# idle clocks, application clocks, display clocks. The detail view lists every reason anyway.
THROTTLE_BADGES: dict[str, tuple[str, str]] = {
    "sw_power_cap": ("PWR CAP", INFO),
    "sync_boost": ("SYNC BOOST", INFO),
    "board_limit": ("BOARD LIM", INFO),
    "current_limit": ("CUR LIM", INFO),
    "sw_thermal": ("▲ THERMAL", WARNING),
    "hw_thermal": ("▲ HW THERMAL", CRITICAL),
    "hw_slowdown": ("▲ HW SLOWDOWN", CRITICAL),
    "hw_power_brake": ("▲ PWR BRAKE", CRITICAL),
    "prochot": ("▲ PROCHOT", CRITICAL),
}

HOT_MARGIN = 3.0  # °C to slowdown: about to throttle
WARM_MARGIN = 10.0  # °C to slowdown: approaching
MEMORY_WARN = 95.0  # % of memory in use: the bar turns to the warning colour
BUSY_UTIL = 50.0  # PCIe links downshift when idle; judge the link only under load


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Where the colours change: the defaults above, or what the config file says."""

    memory_warn: float = MEMORY_WARN
    temp_warm: float = WARM_MARGIN
    temp_hot: float = HOT_MARGIN

    def __post_init__(self) -> None:
        if not 0 < self.memory_warn <= 100:
            raise ValueError("memory_warn is a percentage, above 0 and at most 100")
        if self.temp_hot > self.temp_warm:
            raise ValueError("temp_hot must not be above temp_warm (both °C below slowdown)")


# The thresholds in force: set once at start from the config file (`use_thresholds`).
_thresholds = Thresholds()


def use_thresholds(thresholds: Thresholds) -> None:
    global _thresholds
    _thresholds = thresholds


def thresholds() -> Thresholds:
    return _thresholds


@dataclass(frozen=True, slots=True)
class Badge:
    text: str
    severity: str  # info | warning | critical

    @property
    def rank(self) -> int:
        return _RANK[self.severity]


def badges(d: DeviceSample) -> list[Badge]:
    """Badges for one GPU, most severe first."""
    if d.lost is not None:
        return [Badge(f"{CROSS} LOST", CRITICAL)]
    out: list[Badge] = []
    throttle = value(d.throttle, ())
    for reason in throttle:
        if reason in THROTTLE_BADGES:
            text, severity = THROTTLE_BADGES[reason]
            out.append(Badge(text, severity))
    margin = value(d.temp_margin)
    if margin is not None:
        if margin <= _thresholds.temp_hot:
            out.append(Badge("▲ HOT", CRITICAL))
        elif margin <= _thresholds.temp_warm:
            out.append(Badge("▲ WARM", WARNING))
    if value(d.ecc_uncorrected, 0) > 0:
        out.append(Badge(f"{CROSS} ECC", CRITICAL))
    if value(d.remap_failed, False):
        out.append(Badge(f"{CROSS} REMAP FAIL", CRITICAL))
    elif value(d.remap_pending, False):
        out.append(Badge("▲ REMAP", WARNING))
    if pcie_downtrained(d):
        out.append(Badge("▼ PCIe", WARNING))
    out.sort(key=lambda b: -b.rank)
    return out


def severity(d: DeviceSample) -> str | None:
    """The worst badge's severity, or None when all is well."""
    found = badges(d)
    return found[0].severity if found else None


def pcie_downtrained(d: DeviceSample) -> bool:
    """The link runs below its maximum generation or width while the GPU is busy."""
    util = value(d.util_gpu)
    if util is None or util < BUSY_UTIL:
        return False
    gen, gen_max = value(d.pcie_gen), value(d.pcie_gen_max)
    width, width_max = value(d.pcie_width), value(d.pcie_width_max)
    slow_gen = gen is not None and gen_max is not None and gen < gen_max
    narrow = width is not None and width_max is not None and width < width_max
    return slow_gen or narrow


def fraction(used: object, total: object) -> float | None:
    """used / total in 0..1, or None when either is missing or total is 0."""
    if isinstance(used, Missing) or isinstance(total, Missing) or not total:
        return None
    return max(0.0, min(1.0, float(used) / float(total)))  # type: ignore[arg-type]
