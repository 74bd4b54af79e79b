"""Read `nvidia-smi -q -x` output into a Snapshot.

Every schema seen in the wild is accepted: the old one (nvsmi_device_v10, `power_readings`,
`clocks_throttle_reasons`), v11/v12 (`gpu_power_readings`, `clocks_event_reasons`, SRAM/DRAM ECC
counts) and v13 (`average_/instant_power_draw`, thresholds relative to T.Limit, clock-event time
counters). Tags are looked up by name with fallbacks rather than by schema version, because
nvidia-smi changes tags one at a time between driver releases.

Text nvidia-smi prints instead of a value becomes a `Missing`: "N/A", "Not Supported" and
"Requested functionality has been deprecated" (with or without brackets) -> "unsupported",
"[Insufficient Permissions]" -> "no_permission", "GPU is lost" -> "gpu_lost", error texts ->
"error". A field whose tag is not in the file at all is "unsupported" with the detail
`NOT_IN_FILE`, so the two cases stay apart.
"""

from __future__ import annotations

import calendar
import dataclasses
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any

from gputop.importers.nvsmi_values import ABSENT as _ABSENT
from gputop.importers.nvsmi_values import NOT_IN_FILE as NOT_IN_FILE
from gputop.importers.nvsmi_values import PROCESS_KINDS as _PROCESS_KINDS
from gputop.importers.nvsmi_values import REASONS as _REASONS
from gputop.importers.nvsmi_values import Reading
from gputop.importers.nvsmi_values import classify as _classify
from gputop.importers.nvsmi_values import pstate as _pstate
from gputop.importers.nvsmi_values import text_or_blank as _text_or_blank
from gputop.importers.nvsmi_values import unreadable as _unreadable
from gputop.model import (
    THROTTLE,
    DeviceSample,
    HostSample,
    MigDevice,
    Missing,
    ProcessSample,
    Snapshot,
    SystemInfo,
    mark_all,
)

Number = float | Missing

# Units as nvidia-smi prints them -> factor to gputop's units (bytes, W, °C, MHz, %, bytes/s).
_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_WATTS = {"W": 1}
_CELSIUS = {"C": 1}
_MHZ = {"MHz": 1}
_PERCENT = {"%": 1}
_LANES = {"x": 1}
_COUNT = {"": 1}
_MICROSECONDS = {"us": 1}
# nvidia-smi prints nvmlDeviceGetPcieThroughput as is; NVML's "KB" is 1024 bytes, as in the NVML
# source, so an imported snapshot and a live one agree.
_KB_PER_S = {"KB/s": 1024}
# What -q -x never says of a process: the host side, and per-process utilization.
_HOST_ABSENT: dict[str, Any] = dict.fromkeys(
    ("sm_util", "mem_util", "user", "cmdline", "cpu_percent", "rss", "create_time"), _ABSENT)

_QUANTITY = re.compile(r"(-?\d+(?:\.\d+)?)\s*(\S*)")

# v13 `clocks_event_reasons_counters_*` (microseconds) -> model.THROTTLE name.
_REASON_COUNTERS = {
    "sw_power_cap": "sw_power_cap",
    "sync_boost": "sync_boost",
    "sw_therm_slowdown": "sw_thermal",
    "hw_therm_slowdown": "hw_thermal",
    "hw_power_brake": "hw_power_brake",
}

_MONTHS = {name: i for i, name in enumerate(calendar.month_abbr) if name}


# ----------------------------------------------------------------------------------------------
# Entry point


def parse_nvsmi_xml(text: str, *, time: float | None = None) -> Snapshot:
    """One Snapshot from one `nvidia-smi -q -x` output.

    Device index is the order of `<gpu>` elements in the file (`minor_number` is not the index
    NVML or CUDA use). `time` overrides the file's `<timestamp>`, which carries no time zone and is
    read as UTC.
    """
    return read_log(_parse_root(text), time=time)


# A <gpu> element with this attribute stands for a GPU nvidia-smi could not open ("Unable to
# determine the device handle for GPU ...: GPU is lost"); its value is nvidia-smi's reason. Only
# the plain-text importer builds such elements: nvidia-smi leaves the GPU out of its XML.
UNREACHABLE = "gputop-unreachable"


def read_log(root: ET.Element, *, time: float | None = None,
             warnings: Iterable[str] = ()) -> Snapshot:
    """One Snapshot from the element tree of an `nvidia-smi -q -x` log: the XML's, or the one
    the plain `-q` text importer builds with the same tags."""
    warnings = list(warnings)
    devices: list[DeviceSample] = []
    processes: list[ProcessSample] = []
    for index, gpu in enumerate(root.findall("gpu")):
        reason = gpu.get(UNREACHABLE)
        if reason is not None:
            devices.append(_unreachable(index, gpu.get("id", ""), reason))
            continue
        devices.append(_device(index, gpu, warnings))
        processes.extend(_processes(index, gpu, warnings))

    attached = _number(root, "attached_gpus", _COUNT)
    if not isinstance(attached, Missing) and int(attached) != len(devices):
        warnings.append(f"the file says {int(attached)} GPUs are attached but lists {len(devices)}")

    if time is None:
        time = _timestamp(root, warnings)
    system = SystemInfo(
        hostname="",
        backends=("nvidia-smi",),
        driver_version=_reading(root, "driver_version"),
        cuda_version=_reading(root, "cuda_version"),
        nvml_version=_ABSENT,
        rocm_version=_ABSENT,
    )
    return Snapshot(
        time=time,
        system=system,
        host=mark_all(HostSample(), _ABSENT),
        devices=tuple(devices),
        processes=tuple(processes),
        warnings=tuple(warnings),
    )


def _parse_root(text: str) -> ET.Element:
    if not text.strip():
        raise ValueError("empty input: expected `nvidia-smi -q -x` output")
    # nvidia-smi never declares entities; refusing them keeps entity expansion out of the parser.
    if "<!ENTITY" in text:
        raise ValueError("not `nvidia-smi -q -x` output: it declares XML entities")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not valid XML ({e}): expected `nvidia-smi -q -x` output") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(
            f"not `nvidia-smi -q -x` output: the root element is <{root.tag}>, "
            "not <nvidia_smi_log>"
        )
    return root


def _timestamp(root: ET.Element, warnings: list[str]) -> float:
    stamp = _reading(root, "timestamp")
    when = parse_timestamp(stamp) if isinstance(stamp, str) else None
    if when is None:
        warnings.append("no readable <timestamp> in the file; time set to 0")
        return 0.0
    return when


def parse_timestamp(stamp: str) -> float | None:
    """"Fri Aug  4 11:44:30 2023" (nvidia-smi's time) as epoch seconds, read as UTC; None when
    it is not one.

    Parsed by hand rather than with strptime, whose month names follow the current locale."""
    try:
        _, month, day, clock, year = stamp.split()
        hour, minute, second = (int(x) for x in clock.split(":"))
        fields = (int(year), _MONTHS[month], int(day), hour, minute, second)
        if not (1 <= fields[2] <= 31 and hour < 24 and minute < 60 and second < 61):
            return None
    except (ValueError, KeyError):
        return None
    return float(calendar.timegm(fields))


# ----------------------------------------------------------------------------------------------
# Reading one element


def _reading(parent: ET.Element | None, path: str) -> Reading:
    el = None if parent is None else parent.find(path)
    if el is None:
        return _ABSENT
    return _classify(el.text or "")


def _placeholder(section: ET.Element) -> Missing:
    """Why a section has no children: it printed one text instead (`<remapped_rows>N/A`)."""
    r = _classify(section.text or "")
    return r if isinstance(r, Missing) else _unreadable(r)


def _first(parent: ET.Element | None, paths: Iterable[str]) -> Reading:
    """The first of several alternative tags that has a value; else the first one's Missing."""
    found: Missing | None = None
    for path in paths:
        r = _reading(parent, path)
        if not isinstance(r, Missing):
            return r
        if found is None and r is not _ABSENT:
            found = r
    return _ABSENT if found is None else found


def _quantity(r: Reading, units: Mapping[str, float]) -> Number:
    if isinstance(r, Missing):
        return r
    m = _QUANTITY.fullmatch(r)
    if m is None or m.group(2) not in units:
        return _unreadable(r)
    return float(m.group(1)) * units[m.group(2)]


def _number(parent: ET.Element | None, path: str, units: Mapping[str, float]) -> Number:
    return _quantity(_reading(parent, path), units)


def _integer(parent: ET.Element | None, path: str, units: Mapping[str, float]) -> int | Missing:
    v = _number(parent, path, units)
    return v if isinstance(v, Missing) else round(v)


def _flag(parent: ET.Element | None, path: str) -> bool | Missing:
    r = _reading(parent, path)
    if isinstance(r, Missing):
        return r
    word = r.lower()
    if word in ("enabled", "yes", "active"):
        return True
    if word in ("disabled", "no", "not active"):
        return False
    return _unreadable(r)


def _sum(values: Iterable[int | Missing]) -> int | Missing:
    """Sum of the counters that have a value; a location nvidia-smi marks N/A has no counter."""
    values = list(values)
    known = [v for v in values if not isinstance(v, Missing)]
    if known:
        return sum(known)
    return values[0] if values else _ABSENT


# ----------------------------------------------------------------------------------------------
# One GPU


def _unreachable(index: int, bus_id: str, reason: str) -> DeviceSample:
    """A GPU nvidia-smi could not open. NVML fails to give a handle to a GPU that fell off the
    bus ("GPU is lost", and "Unknown Error" from older drivers): it is marked lost, as the NVML
    source marks a GPU whose handle it cannot get, with nvidia-smi's words as the detail."""
    lost = Missing("gpu_lost", detail=reason)
    base = DeviceSample(index=index, vendor="nvidia", name="", uuid="", pci_bus_id=bus_id)
    return dataclasses.replace(mark_all(base, lost), lost=lost)


def _device(index: int, gpu: ET.Element, warnings: list[str]) -> DeviceSample:
    sample = _readings(index, gpu, warnings)
    # A GPU that fell off the bus while nvidia-smi read it prints "GPU is lost" for its values.
    if any(getattr(sample, name) == _GPU_LOST for name in DeviceSample._measured):
        sample = dataclasses.replace(sample, lost=_GPU_LOST)
    return sample


_GPU_LOST = Missing("gpu_lost")


def _readings(index: int, gpu: ET.Element, warnings: list[str]) -> DeviceSample:
    fb = gpu.find("fb_memory_usage")
    util = gpu.find("utilization")
    clocks = gpu.find("clocks")
    max_clocks = gpu.find("max_clocks")
    link = gpu.find("pci/pci_gpu_link_info")
    bus_id = _reading(gpu, "pci/pci_bus_id")
    return DeviceSample(
        index=index,
        vendor="nvidia",
        name=_text_or_blank(_reading(gpu, "product_name")),
        uuid=_text_or_blank(_reading(gpu, "uuid")),
        # Trimmed or old files have no <pci_bus_id>; the <gpu id="..."> attribute is the same id.
        pci_bus_id=bus_id if isinstance(bus_id, str) else gpu.get("id", ""),
        util_gpu=_number(util, "gpu_util", _PERCENT),
        util_mem=_number(util, "memory_util", _PERCENT),
        mem_total=_integer(fb, "total", _BYTES),
        # Files without <reserved> (before driver 510 or so) give NVML v1 "used", which includes
        # the driver's reservation; there is nothing to subtract it with, so it is kept as is.
        mem_used=_integer(fb, "used", _BYTES),
        mem_reserved=_integer(fb, "reserved", _BYTES),
        mem_free=_integer(fb, "free", _BYTES),
        pstate=_pstate(_reading(gpu, "performance_state")),
        fan=_number(gpu, "fan_speed", _PERCENT),
        persistence_mode=_flag(gpu, "persistence_mode"),
        clock_sm=_integer(clocks, "sm_clock", _MHZ),
        clock_mem=_integer(clocks, "mem_clock", _MHZ),
        clock_sm_max=_integer(max_clocks, "sm_clock", _MHZ),
        clock_mem_max=_integer(max_clocks, "mem_clock", _MHZ),
        pcie_gen=_integer(link, "pcie_gen/current_link_gen", _COUNT),
        pcie_gen_max=_integer(link, "pcie_gen/max_link_gen", _COUNT),
        pcie_width=_integer(link, "link_widths/current_link_width", _LANES),
        pcie_width_max=_integer(link, "link_widths/max_link_width", _LANES),
        pcie_rx=_number(gpu, "pci/rx_util", _KB_PER_S),
        pcie_tx=_number(gpu, "pci/tx_util", _KB_PER_S),
        pcie_replays=_integer(gpu, "pci/replay_counter", _COUNT),
        enc_util=_number(util, "encoder_util", _PERCENT),
        dec_util=_number(util, "decoder_util", _PERCENT),
        throttle=_throttle(gpu, index, warnings),
        throttle_time=_throttle_time(gpu.find("clocks_event_reasons_counters")),
        mig_enabled=_flag(gpu, "mig_mode/current_mig"),
        mig_devices=_mig_devices(gpu, index),
        # No -q -x schema (v10 to v13) prints these.
        compute_capability=_ABSENT,
        energy_j=_ABSENT,
        gr_active=_ABSENT,
        sm_active=_ABSENT,
        sm_occupancy=_ABSENT,
        tensor_active=_ABSENT,
        dram_active=_ABSENT,
        numa_node=_ABSENT,
        cpu_affinity=_ABSENT,
        **_temperatures(gpu.find("temperature")),
        **_power(gpu),
        **_ecc(gpu),
        **_remapped_rows(gpu.find("remapped_rows")),
        **_retired_pages(gpu.find("retired_pages")),
    )


def _temperatures(temp: ET.Element | None) -> dict[str, Any]:
    out: dict[str, object] = {
        "temp_gpu": _number(temp, "gpu_temp", _CELSIUS),
        "temp_mem": _number(temp, "memory_temp", _CELSIUS),
        # "GPU T.Limit Temp" is NVML's margin: °C left before the GPU max operating temperature.
        "temp_margin": _number(temp, "gpu_temp_tlimit", _CELSIUS),
    }
    thresholds = {
        "temp_slowdown": "gpu_temp_slow",
        "temp_shutdown": "gpu_temp_max",
        "temp_max_operating": "gpu_temp_max_gpu",
    }
    for field, stem in thresholds.items():
        value = _number(temp, f"{stem}_threshold", _CELSIUS)
        relative = _reading(temp, f"{stem}_tlimit_threshold")
        if value is _ABSENT and isinstance(relative, str):
            # Newer drivers print thresholds only relative to T.Limit. Absolute = temp + margin -
            # relative holds only when the margin is set by the GPU (not memory) limit, which the
            # file does not say, so the value stays unknown and the detail keeps what was printed.
            value = Missing("unsupported", detail=f"only relative to T.Limit: {relative}")
        out[field] = value
    return out


def _power(gpu: ET.Element) -> dict[str, Any]:
    p = gpu.find("gpu_power_readings")
    if p is None:
        p = gpu.find("power_readings")
    return {
        # v13 split the reading: the 1 s average is what nvmlDeviceGetPowerUsage returns on
        # Ampere and newer, so it comes before the instant one.
        "power_draw": _quantity(
            _first(p, ("power_draw", "average_power_draw", "instant_power_draw")), _WATTS
        ),
        # Old schema: enforced_power_limit; v12+: current_power_limit is the enforced one
        # (the old power_limit and the new requested_power_limit are what was asked for).
        "power_limit": _quantity(
            _first(p, ("enforced_power_limit", "current_power_limit", "power_limit")), _WATTS
        ),
        "power_default_limit": _number(p, "default_power_limit", _WATTS),
    }


def _throttle(gpu: ET.Element, index: int, warnings: list[str]) -> tuple[str, ...] | Missing:
    section = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if section is None:
        section = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if section is None:
        return _ABSENT
    if len(section) == 0:
        return _placeholder(section)
    active: set[str] = set()
    states: list[bool | Missing] = []
    for child in section:
        state = _flag(section, child.tag)
        states.append(state)
        if state is not True:
            continue
        name = _REASONS.get(child.tag.removeprefix(prefix))
        if name is None:
            warnings.append(f"GPU{index}: clock event reason <{child.tag}> is Active but unknown")
        else:
            active.add(name)
    if all(isinstance(s, Missing) for s in states):
        return next(s for s in states if isinstance(s, Missing))
    return tuple(name for name in THROTTLE if name in active)


def _throttle_time(section: ET.Element | None) -> Mapping[str, float] | Missing:
    if section is None:
        return _ABSENT
    times: dict[str, float] = {}
    first_missing: Missing | None = None
    for child in section:
        name = _REASON_COUNTERS.get(child.tag.removeprefix("clocks_event_reasons_counters_"))
        micros = _number(section, child.tag, _MICROSECONDS)
        if isinstance(micros, Missing):
            first_missing = micros if first_missing is None else first_missing
        elif name is not None:
            times[name] = micros / 1_000_000
    if times:
        return times
    return _ABSENT if first_missing is None else first_missing


def _ecc(gpu: ET.Element) -> dict[str, Any]:
    enabled = _flag(gpu, "ecc_mode/current_ecc")
    out: dict[str, Any] = {"ecc_enabled": enabled}
    for scope, suffix in (("volatile", ""), ("aggregate", "_aggregate")):
        counts = _ecc_counts(gpu.find(f"ecc_errors/{scope}"))
        if enabled is False:
            # Counts read N/A with ECC off; say why, as the NVML source does.
            counts = dict.fromkeys(counts, Missing("unsupported", detail="ECC is off"))
        out.update({f"ecc_{name}{suffix}": v for name, v in counts.items()})
    out["ecc_sram_threshold_exceeded"] = _flag(gpu, "ecc_errors/aggregate/sram_threshold_exceeded")
    return out


def _ecc_counts(section: ET.Element | None) -> dict[str, int | Missing]:
    """corrected, uncorrected, uncorrected_sram, uncorrected_dram of one scope (volatile or
    aggregate)."""
    if section is not None and (section.find("single_bit") is not None
                                or section.find("double_bit") is not None):
        # Before v11: per-location counts with a total for single- and double-bit errors. Device
        # memory is the DRAM; every other location (register file, caches, texture, CBU) is SRAM
        # on the chip.
        uncorrected = _integer(section, "double_bit/total", _COUNT)
        dram = _integer(section, "double_bit/device_memory", _COUNT)
        sram = _sum(_integer(section, f"double_bit/{loc}", _COUNT) for loc in
                    ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm",
                     "cbu"))
        return {"corrected": _integer(section, "single_bit/total", _COUNT),
                "uncorrected": uncorrected, "uncorrected_sram": sram, "uncorrected_dram": dram}
    if section is None:
        return dict.fromkeys(("corrected", "uncorrected", "uncorrected_sram",
                              "uncorrected_dram"), _ABSENT)
    # v11+: sram_/dram_ (un)correctable, and from v12 sram_uncorrectable_parity/_secded.
    counts = {child.tag: _integer(section, child.tag, _COUNT) for child in section
              if child.tag.startswith(("sram_", "dram_")) and child.tag.count("correctable")}
    return {
        "corrected": _sum(v for k, v in counts.items() if k.endswith("_correctable")),
        "uncorrected": _sum(v for k, v in counts.items() if "_uncorrectable" in k),
        "uncorrected_sram": _sum(v for k, v in counts.items()
                                 if k.startswith("sram_uncorrectable")),
        "uncorrected_dram": _sum(v for k, v in counts.items()
                                 if k.startswith("dram_uncorrectable")),
    }


def _retired_pages(pages: ET.Element | None) -> dict[str, Any]:
    names = ("retired_single_bit", "retired_double_bit", "retire_pending")
    if pages is not None and len(pages) == 0:
        return dict.fromkeys(names, _placeholder(pages))  # <retired_pages>N/A</retired_pages>
    # Pages wait for the next driver load to be retired: "pending_blacklist" in every schema,
    # "pending_retirement" beside it from v10 on; either pending is pending.
    pending = [_flag(pages, "pending_blacklist"), _flag(pages, "pending_retirement")]
    known = [p for p in pending if not isinstance(p, Missing)]
    return dict(zip(names, (
        _integer(pages, "multiple_single_bit_retirement/retired_count", _COUNT),
        _integer(pages, "double_bit_retirement/retired_count", _COUNT),
        any(known) if known else _first_missing(pending),
    )))


def _first_missing(values: list[bool | Missing]) -> Missing:
    """The Missing that says most: one the file printed before one it lacks."""
    found = [v for v in values if isinstance(v, Missing)]
    return next((v for v in found if v is not _ABSENT), found[0] if found else _ABSENT)


def _remapped_rows(rows: ET.Element | None) -> dict[str, Any]:
    counts = {"remapped_corrected": "remapped_row_corr", "remapped_uncorrected": "remapped_row_unc"}
    flags = {"remap_pending": "remapped_row_pending", "remap_failed": "remapped_row_failure"}
    if rows is not None and len(rows) == 0:
        # <remapped_rows>N/A</remapped_rows>: before Ampere, or with MIG on.
        return dict.fromkeys([*counts, *flags], _placeholder(rows))
    out: dict[str, object] = {f: _integer(rows, tag, _COUNT) for f, tag in counts.items()}
    out.update({f: _flag(rows, tag) for f, tag in flags.items()})
    return out


def _mig_devices(gpu: ET.Element, index: int) -> tuple[MigDevice, ...]:
    out = []
    for mig in gpu.findall("mig_devices/mig_device"):
        gi = _integer(mig, "gpu_instance_id", _COUNT)
        ci = _integer(mig, "compute_instance_id", _COUNT)
        if isinstance(gi, Missing) or isinstance(ci, Missing):
            raise ValueError(f"GPU{index}: a MIG device without a GPU or compute instance id")
        fb = mig.find("fb_memory_usage")
        out.append(MigDevice(
            gpu_instance=gi,
            compute_instance=ci,
            uuid=_ABSENT,  # -q -x prints neither a UUID nor a profile name per instance
            name=_ABSENT,
            mem_total=_integer(fb, "total", _BYTES),
            mem_used=_integer(fb, "used", _BYTES),
            sm_active=_ABSENT,
        ))
    return tuple(out)


# ----------------------------------------------------------------------------------------------
# Processes


def _processes(index: int, gpu: ET.Element, warnings: list[str]) -> list[ProcessSample]:
    out = []
    for info in gpu.findall("processes/process_info"):
        pid = _integer(info, "pid", _COUNT)
        if isinstance(pid, Missing):
            raise ValueError(f"GPU{index}: a process without a readable pid")
        kind = _PROCESS_KINDS.get(str(_reading(info, "type")))
        if kind is None:
            warnings.append(f"GPU{index}: pid {pid} has an unknown process type; shown as compute")
        out.append(ProcessSample(
            pid=pid,
            device_index=index,
            kind=kind or "compute",
            gpu_mem=_integer(info, "used_memory", _BYTES),
            gpu_instance=_instance(info, "gpu_instance_id"),
            compute_instance=_instance(info, "compute_instance_id"),
            # nvidia-smi's process name: a path, a bare name or a whole command line.
            name=_reading(info, "process_name"),
            **_HOST_ABSENT,
        ))
    return out


def _instance(info: ET.Element, path: str) -> int | None:
    v = _integer(info, path, _COUNT)
    return None if isinstance(v, Missing) else v
