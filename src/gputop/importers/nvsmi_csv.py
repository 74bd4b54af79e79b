"""Read `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] [-l N]` logs into Snapshots.

One line is one GPU at one moment; a moment with several GPUs is several lines. Lines are grouped
into moments in the order they come: a line starts the next moment when its GPU (index, else UUID,
else PCI bus id) is already in the current one, or its timestamp is half an interval or more
after the moment's first line (nvidia-smi stamps each GPU's line separately, a few ms apart).
Without a GPU column, lines with the same timestamp are one moment. Without a timestamp column,
moment i is at `start + i * interval`, and the first Snapshot says so in its warnings.

Columns are found by name, whichever order and subset the user asked for; nvidia-smi's short
names (`clocks.sm`, `gpu_name`) and the old `clocks_throttle_reasons.*` names are accepted. With
`noheader` the file has no names, and the caller passes the `--query-gpu` list instead. Units come
from the value ("81559 MiB") or, with `nounits`, from the header ("memory.total [MiB]"); a bare
number is in nvidia-smi's unit for that field. Timestamps carry no time zone and are read as UTC,
as the `-q -x` importer does.

A line that cannot be read (a different number of values than the header names, an unreadable
timestamp or index: a truncated last line, two writers interleaved) is skipped, and the Snapshot
of its moment says which line and why.
"""

from __future__ import annotations

import calendar
import functools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gputop.importers.nvsmi_values import (
    ABSENT,
    REASONS,
    Reading,
    classify,
    pstate,
    text_or_blank,
    unreadable,
)
from gputop.importers.timing import moments_taken
from gputop.model import (
    THROTTLE,
    DeviceSample,
    HostSample,
    Missing,
    Snapshot,
    SystemInfo,
    mark_all,
)
from gputop.model.reasons import REASON_BITS

# Units as nvidia-smi prints them -> factor to gputop's units. "" is a bare number (`nounits`, or
# a field printed without a unit), which is in nvidia-smi's unit for that field.
# (Tuples of pairs, so that a parsed value can be cached: a log repeats the same texts.)
_MIB = (("", 2**20), ("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30))
_WATTS = (("", 1), ("W", 1), ("mW", 1e-3))
_MHZ = (("", 1), ("MHz", 1))
_PERCENT = (("", 1), ("%", 1))
_CELSIUS = (("", 1), ("C", 1))
_MICROSECONDS = (("", 1), ("us", 1))
_COUNT = (("", 1),)
Units = tuple[tuple[str, float], ...]

_QUANTITY = re.compile(r"(-?\d+(?:\.\d+)?)\s*([A-Za-z%]*)")
_HEADER_CELL = re.compile(r"[A-Za-z_][\w.]*(?:\s*\[[^\]]*\])?")
_TIMESTAMP = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2}) (\d{1,2}):(\d{2}):(\d{2})(\.\d+)?")

# nvidia-smi --help-query-gpu: a field has a long name and sometimes a short one; the CSV header
# prints the name the user typed. Short (and old) names -> the long name.
ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.applications.mem": "clocks.applications.memory",
}
_OLD_PREFIXES = {
    "clocks_throttle_reasons.": "clocks_event_reasons.",
    "clocks_throttle_reasons_counters.": "clocks_event_reasons_counters.",
}

# Every field this importer reads (after ALIASES); a header must name at least one of them.
KNOWN_FIELDS = frozenset({
    "timestamp", "driver_version", "hostname", "index", "name", "uuid", "pci.bus_id",
    "utilization.gpu", "utilization.memory", "utilization.encoder", "utilization.decoder",
    "memory.total", "memory.used", "memory.free", "memory.reserved",
    "temperature.gpu", "temperature.memory", "temperature.gpu.tlimit",
    "power.draw", "power.draw.average", "power.draw.instant",
    "power.limit", "enforced.power.limit", "power.default_limit",
    "clocks.current.sm", "clocks.current.graphics", "clocks.current.memory",
    "clocks.max.sm", "clocks.max.graphics", "clocks.max.memory",
    "pstate", "fan.speed", "persistence_mode", "compute_cap", "mig.mode.current",
    "pcie.link.gen.current", "pcie.link.gen.gpucurrent", "pcie.link.gen.max",
    "pcie.link.gen.gpumax", "pcie.link.width.current", "pcie.link.width.max",
    "clocks_event_reasons.active",
    *(f"clocks_event_reasons.{r}" for r in REASONS),
    *(f"clocks_event_reasons_counters.{r}" for r in REASONS),
    "ecc.mode.current",
    *(f"ecc.errors.{kind}.{scope}.total" for kind in ("corrected", "uncorrected")
      for scope in ("volatile", "aggregate")),
    *(f"ecc.errors.uncorrected.{scope}.{where}" for scope in ("volatile", "aggregate")
      for where in ("sram", "dram", "device_memory")),
    "ecc.errors.uncorrected.aggregate.sram.thresholdexceeded",
    "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending",
    "remapped_rows.failure",
})


# ----------------------------------------------------------------------------------------------
# Entry points


def field_name(cell: str) -> tuple[str, str]:
    """("memory.total", "MiB") for the header cell "memory.total [MiB]"; short names resolved."""
    name, _, unit = cell.strip().partition("[")
    name = name.strip().lower()
    for old, new in _OLD_PREFIXES.items():
        if name.startswith(old):
            name = new + name[len(old):]
    return ALIASES.get(name, name), unit.rstrip("]").strip()


def is_header(line: str) -> bool:
    """True for a CSV header line of `--query-gpu` (field names, at least one this module reads)."""
    if line[:1].isdigit():  # a value line: a field name never starts with a digit
        return False
    cells = [c.strip() for c in line.split(",")]
    return (all(_HEADER_CELL.fullmatch(c) for c in cells)
            and any(field_name(c)[0] in KNOWN_FIELDS for c in cells))


def parse_query_gpu_csv(text: str, *, fields: Sequence[str] | None = None, start: float = 0.0,
                        interval: float = 1.0, given: Collection[str] = ()) -> list[Snapshot]:
    """The Snapshots of one `--query-gpu` CSV log, in file order.

    `fields` is the `--query-gpu` list for a file written with `noheader` (a header in the file
    wins). `start` and `interval` time the moments of a log without a `timestamp` column.
    Raises ValueError when no line can be read as a GPU.
    """
    reader = _Reader(start=start, interval=interval, given=tuple(given))
    if fields:
        reader.set_header(list(fields))
    for number, line in enumerate(text.splitlines(), 1):
        reader.feed(number, line)
    snaps = reader.finish()
    if not snaps:
        if reader.header is None:
            raise ValueError("no header line naming --query-gpu fields: for a log written "
                             "with `noheader`, pass the fields with --query-gpu")
        raise ValueError("no line of the CSV log could be read as a GPU")
    return snaps


# ----------------------------------------------------------------------------------------------
# Grouping lines into moments


@dataclass
class _Line:
    number: int
    cells: dict[str, str]  # long field name -> printed value
    time: float | None


@dataclass
class _Moment:
    lines: list[_Line] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Reader:
    start: float
    interval: float
    given: tuple[str, ...]  # which of --start and --interval the user set
    header: list[str] | None = None
    units: dict[str, str] = field(default_factory=dict)
    used: list[tuple[int, str]] = field(default_factory=list)  # (column, name) of fields read
    moments: list[_Moment] = field(default_factory=lambda: [_Moment()])

    def set_header(self, cells: list[str]) -> None:
        names = [field_name(c) for c in cells]
        self.header = [n for n, _ in names]
        self.units = {n: u for n, u in names if u}
        self.used = [(i, n) for i, n in enumerate(self.header) if n in KNOWN_FIELDS]

    def feed(self, number: int, line: str) -> None:
        if not line.strip() or line.lstrip().startswith("#"):
            return
        if is_header(line):  # the first line, or a header repeated where logs were appended
            self.set_header(line.split(","))
            return
        if self.header is None:
            return
        cells = line.split(",")
        if len(cells) != len(self.header):
            self._skip(number, f"{len(cells)} values where the header names {len(self.header)}")
            return
        by_name = {name: cells[i].strip() for i, name in self.used}
        when = None
        if "timestamp" in by_name:
            when = _timestamp(by_name["timestamp"])
            if when is None:
                self._skip(number, f"unreadable timestamp {by_name['timestamp']!r}")
                return
        if "index" in by_name and not by_name["index"].isdigit():
            self._skip(number, f"unreadable GPU index {by_name['index']!r}")
            return
        self._place(_Line(number, by_name, when))

    def _place(self, line: _Line) -> None:
        moment = self.moments[-1]
        key = next((line.cells[k] for k in ("index", "uuid", "pci.bus_id") if k in line.cells),
                   None)
        if moment.lines:
            t0 = moment.lines[0].time
            if key is None:
                new = t0 is None or line.time != t0
            else:
                new = key in moment.keys or (
                    t0 is not None and line.time is not None
                    and abs(line.time - t0) >= self.interval / 2)
            if new:
                moment = _Moment()
                self.moments.append(moment)
        moment.lines.append(line)
        if key is not None:
            moment.keys.add(key)

    def _skip(self, number: int, why: str) -> None:
        self.moments[-1].warnings.append(f"line {number} skipped: {why}")

    def finish(self) -> list[Snapshot]:
        moments = [m for m in self.moments if m.lines]
        if not moments:
            return []
        slots = _DeviceSlots()
        snaps = []
        for i, moment in enumerate(moments):
            when = moment.lines[0].time
            warnings = list(moment.warnings)
            if when is None:
                when = self.start + i * self.interval
                if i == 0:
                    warnings.insert(0, "no timestamp column: " + moments_taken(
                        self.start, self.interval, self.given))
            devices = [_device(slots.index(line, pos), line.cells, self.units, when, slots)
                       for pos, line in enumerate(moment.lines)]
            snaps.append(_snapshot(when, devices, moment.lines[0].cells, warnings))
        return snaps


def _timestamp(text: str) -> float | None:
    """"2024/09/08 13:03:31.000" as epoch seconds, read as UTC."""
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        return None
    return calendar.timegm((y, mo, d, h, mi, s)) + (float(m.group(7)) if m.group(7) else 0.0)


@dataclass
class _DeviceSlots:
    """Device index of each line: the `index` column, else first-seen order of the UUID or bus
    id, else the line's place in its moment. Also when each GPU was first seen lost."""

    by_id: dict[str, int] = field(default_factory=dict)
    lost_since: dict[int, float] = field(default_factory=dict)

    def index(self, line: _Line, position: int) -> int:
        cells = line.cells
        if "index" in cells:
            return int(cells["index"])
        ident = cells.get("uuid") or cells.get("pci.bus_id")
        if ident is None:
            return position
        return self.by_id.setdefault(ident, len(self.by_id))


# ----------------------------------------------------------------------------------------------
# One line -> one DeviceSample


_ALL_ABSENT = dict.fromkeys(DeviceSample._measured, ABSENT)


class _Cells:
    def __init__(self, cells: Mapping[str, str], units: Mapping[str, str]) -> None:
        self.cells = cells
        self.units = units

    def pick(self, names: tuple[str, ...]) -> tuple[str, Reading]:
        """The first of the fields `names` that has a value; else the first one's Missing."""
        found: tuple[str, Reading] = ("", ABSENT)
        for name in names:
            text = self.cells.get(name)
            if text is None:
                continue
            r = classify(text)
            if not isinstance(r, Missing):
                return name, r
            if found[1] is ABSENT:
                found = (name, r)
        return found

    def reading(self, *names: str) -> Reading:
        return self.pick(names)[1]

    def number(self, units: Units, *names: str) -> float | Missing:
        name, r = self.pick(names)
        return r if isinstance(r, Missing) else _scaled(r, self.units.get(name, ""), units)

    def integer(self, units: Units, *names: str) -> int | Missing:
        v = self.number(units, *names)
        return v if isinstance(v, Missing) else round(v)

    def flag(self, name: str) -> bool | Missing:
        r = self.reading(name)
        if isinstance(r, Missing):
            return r
        word = r.lower()
        if word in ("enabled", "yes", "active"):
            return True
        if word in ("disabled", "no", "not active"):
            return False
        return unreadable(r)


@functools.lru_cache(maxsize=4096)
def _scaled(text: str, header_unit: str, units: Units) -> float | Missing:
    m = _QUANTITY.fullmatch(text)
    unit = (m.group(2) or header_unit) if m else ""
    factor = dict(units).get(unit)
    if m is None or factor is None:
        return unreadable(text)
    return float(m.group(1)) * factor


def _device(index: int, cells: Mapping[str, str], units: Mapping[str, str], when: float,
            slots: _DeviceSlots) -> DeviceSample:
    c = _Cells(cells, units)
    f: dict[str, object] = dict(_ALL_ABSENT)
    f.update(
        util_gpu=c.number(_PERCENT, "utilization.gpu"),
        util_mem=c.number(_PERCENT, "utilization.memory"),
        enc_util=c.number(_PERCENT, "utilization.encoder"),
        dec_util=c.number(_PERCENT, "utilization.decoder"),
        mem_total=c.integer(_MIB, "memory.total"),
        mem_used=c.integer(_MIB, "memory.used"),
        mem_free=c.integer(_MIB, "memory.free"),
        mem_reserved=c.integer(_MIB, "memory.reserved"),
        temp_gpu=c.number(_CELSIUS, "temperature.gpu"),
        temp_mem=c.number(_CELSIUS, "temperature.memory"),
        # "temperature.gpu.tlimit" is NVML's margin: °C left before the max operating temperature.
        temp_margin=c.number(_CELSIUS, "temperature.gpu.tlimit"),
        # On Ampere and newer power.draw is the 1 s average, which is what NVML's live reading
        # gives; the instant one is the last resort.
        power_draw=c.number(_WATTS, "power.draw", "power.draw.average", "power.draw.instant"),
        power_limit=c.number(_WATTS, "enforced.power.limit", "power.limit"),
        power_default_limit=c.number(_WATTS, "power.default_limit"),
        clock_sm=c.integer(_MHZ, "clocks.current.sm", "clocks.current.graphics"),
        clock_mem=c.integer(_MHZ, "clocks.current.memory"),
        clock_sm_max=c.integer(_MHZ, "clocks.max.sm", "clocks.max.graphics"),
        clock_mem_max=c.integer(_MHZ, "clocks.max.memory"),
        pstate=pstate(c.reading("pstate")),
        fan=c.number(_PERCENT, "fan.speed"),
        persistence_mode=c.flag("persistence_mode"),
        compute_capability=c.reading("compute_cap"),
        mig_enabled=c.flag("mig.mode.current"),
        pcie_gen=c.integer(_COUNT, "pcie.link.gen.current", "pcie.link.gen.gpucurrent"),
        pcie_gen_max=c.integer(_COUNT, "pcie.link.gen.max", "pcie.link.gen.gpumax"),
        pcie_width=c.integer(_COUNT, "pcie.link.width.current"),
        pcie_width_max=c.integer(_COUNT, "pcie.link.width.max"),
        throttle=_throttle(c),
        throttle_time=_throttle_time(c),
        remapped_corrected=c.integer(_COUNT, "remapped_rows.correctable"),
        remapped_uncorrected=c.integer(_COUNT, "remapped_rows.uncorrectable"),
        remap_pending=c.flag("remapped_rows.pending"),
        remap_failed=c.flag("remapped_rows.failure"),
        **_ecc(c),
    )
    lost = None
    if any(isinstance(v, Missing) and v.reason == "gpu_lost" for v in f.values()):
        lost = Missing("gpu_lost", since=slots.lost_since.setdefault(index, when))
    return DeviceSample(
        index=index,
        vendor="nvidia",
        name=text_or_blank(c.reading("name")),
        uuid=text_or_blank(c.reading("uuid")),
        pci_bus_id=text_or_blank(c.reading("pci.bus_id")),
        lost=lost,
        **f,  # type: ignore[arg-type]
    )


def _throttle(c: _Cells) -> tuple[str, ...] | Missing:
    """Active clock-event reasons: from the per-reason columns, else the `active` bit mask."""
    columns = [(name, c.flag(f"clocks_event_reasons.{suffix}")) for suffix, name in REASONS.items()
               if f"clocks_event_reasons.{suffix}" in c.cells]
    if columns:
        known = [(name, s) for name, s in columns if not isinstance(s, Missing)]
        if not known:
            return next(s for _, s in columns if isinstance(s, Missing))
        active = {name for name, s in known if s}
        return tuple(name for name in THROTTLE if name in active)
    mask = c.reading("clocks_event_reasons.active")
    if isinstance(mask, Missing):
        return mask
    try:
        bits = int(mask, 16)
    except ValueError:
        return unreadable(mask)
    return tuple(name for bit, name in REASON_BITS.items() if bits & bit)


def _throttle_time(c: _Cells) -> Mapping[str, float] | Missing:
    times: dict[str, float] = {}
    first_missing: Missing | None = None
    for suffix, name in REASONS.items():
        column = f"clocks_event_reasons_counters.{suffix}"
        if column not in c.cells:
            continue
        micros = c.number(_MICROSECONDS, column)
        if isinstance(micros, Missing):
            first_missing = first_missing or micros
        else:
            times[name] = micros / 1_000_000  # as the -q -x importer: the same seconds
    if times:
        return times
    return first_missing or ABSENT


def _ecc(c: _Cells) -> dict[str, object]:
    enabled = c.flag("ecc.mode.current")
    counts: dict[str, object] = {}
    for scope, suffix in (("volatile", ""), ("aggregate", "_aggregate")):
        counts.update({
            f"ecc_corrected{suffix}": c.integer(_COUNT, f"ecc.errors.corrected.{scope}.total"),
            f"ecc_uncorrected{suffix}": c.integer(_COUNT,
                                                  f"ecc.errors.uncorrected.{scope}.total"),
            f"ecc_uncorrected_sram{suffix}": c.integer(_COUNT,
                                                       f"ecc.errors.uncorrected.{scope}.sram"),
            # Before Ampere the DRAM is the "device memory" location.
            f"ecc_uncorrected_dram{suffix}": c.integer(
                _COUNT, f"ecc.errors.uncorrected.{scope}.dram",
                f"ecc.errors.uncorrected.{scope}.device_memory"),
        })
    if enabled is False:
        # Counts read N/A with ECC off; say why, as the NVML source does.
        counts = dict.fromkeys(counts, Missing("unsupported", detail="ECC is off"))
    return {"ecc_enabled": enabled, **counts,
            "ecc_sram_threshold_exceeded": c.flag(
                "ecc.errors.uncorrected.aggregate.sram.thresholdexceeded"),
            "retired_single_bit": c.integer(_COUNT, "retired_pages.single_bit_ecc.count"),
            "retired_double_bit": c.integer(_COUNT, "retired_pages.double_bit.count"),
            "retire_pending": c.flag("retired_pages.pending")}


def _snapshot(when: float, devices: Iterable[DeviceSample], first: Mapping[str, str],
              warnings: list[str]) -> Snapshot:
    c = _Cells(first, {})
    host = c.reading("hostname")
    return Snapshot(
        time=when,
        system=SystemInfo(
            hostname=host if isinstance(host, str) else "",
            backends=("nvidia-smi",),
            driver_version=c.reading("driver_version"),
            cuda_version=ABSENT,
            nvml_version=ABSENT,
            rocm_version=ABSENT,
        ),
        host=mark_all(HostSample(), ABSENT),
        devices=tuple(sorted(devices, key=lambda d: d.index)),
        warnings=tuple(warnings),
    )
