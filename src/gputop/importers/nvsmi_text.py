"""Read plain `nvidia-smi -q` output (also `-a`, `-q -i N`, `-q -d ...` and `-q -l N` loops) into
Snapshots.

The text is the `-q -x` document printed for people: the same values under labels instead of
tags, nested by indentation. Each moment (one "NVSMI LOG" banner, or one top-level `Timestamp`
where a pasted loop lost its banners) is turned into the element tree `-q -x` prints for it and
read by the XML importer, so every field comes out of the text as it comes out of the XML of the
same moment. Labels are looked up by name within their section, as the XML importer looks up
tags; a label this module does not know is left out, and a field whose label is not in the text
is `Missing("unsupported")` with the detail `NOT_IN_FILE`.

A line "Unable to determine the device handle for GPU <bus id>: <reason>" (nvidia-smi could not
open that GPU: "GPU is lost", "Unknown Error") becomes that GPU, marked lost, in the moment it is
printed in, in PCI bus order among the others. Lines that are not `-q` output (a shell prompt, a
pasted command) are skipped; a moment with no GPU and no such line is skipped and said.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from gputop.importers.nvsmi_values import REASONS
from gputop.importers.nvsmi_xml import UNREACHABLE, parse_timestamp, read_log
from gputop.importers.timing import moments_taken
from gputop.model import Snapshot

BANNER = "NVSMI LOG"
_BANNER_LINE = re.compile(r"\s*=+\s*NVSMI LOG\s*=+\s*")
# "Label    : value": the label is padded with spaces up to the colon; a value may hold colons
# ("C:\\Windows\\...", bus ids) but a label never holds " :".
_SEPARATOR = " :"
_GPU_HEADER = re.compile(r"GPU (?P<id>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
UNREACHABLE_LINE = re.compile(
    r"Unable to determine the device handle for (?:GPU)\s*(?P<id>[0-9A-Fa-f:.]+):\s*(?P<why>.*)")
# Driver 610 prints "610.57.04 [Deprecated; will be removed in CUDA 14.0. Use KMD Version ...]".
_DEPRECATED = re.compile(r"\s*\[Deprecated[^\]]*\]\s*$")

# ----------------------------------------------------------------------------------------------
# Labels -> -q -x tags, section by section. A value is a tag (a path: "a/b" makes <a><b>), or
# (tag, labels of its children). INLINE reads a subsection's labels as if they were its parent's
# (-q nests "HW Thermal Slowdown" under "HW Slowdown", -q -x lists them side by side).

INLINE = ""
Labels = Mapping[str, str | tuple[str, "Labels"]]

_FB: Labels = {"Total": "total", "Reserved": "reserved", "Used": "used", "Free": "free"}
_CLOCKS: Labels = {"Graphics": "graphics_clock", "SM": "sm_clock", "Memory": "mem_clock",
                   "Video": "video_clock"}
_REASON_LABELS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clocks_setting",
}
assert set(_REASON_LABELS.values()) <= set(REASONS)


def _reasons(prefix: str) -> Labels:
    return {label: prefix + suffix for label, suffix in _REASON_LABELS.items()}


_COUNTERS = "clocks_event_reasons_counters_"
_REASON_COUNTERS: Labels = {
    "SW Power Capping": _COUNTERS + "sw_power_cap",
    "Sync Boost": _COUNTERS + "sync_boost",
    "SW Thermal Slowdown": _COUNTERS + "sw_therm_slowdown",
    "HW Thermal Slowdown": _COUNTERS + "hw_therm_slowdown",
    "HW Power Braking": _COUNTERS + "hw_power_brake",
}
_BY_LOCATION = {"Device Memory": "device_memory", "Register File": "register_file",
                "L1 Cache": "l1_cache", "L2 Cache": "l2_cache", "Texture Memory": "texture_memory",
                "Texture Shared": "texture_shm", "CBU": "cbu", "Total": "total"}
_ECC_COUNTS: Labels = {
    "SRAM Correctable": "sram_correctable",
    "SRAM Uncorrectable": "sram_uncorrectable",
    "SRAM Uncorrectable Parity": "sram_uncorrectable_parity",
    "SRAM Uncorrectable SEC-DED": "sram_uncorrectable_secded",
    "DRAM Correctable": "dram_correctable",
    "DRAM Uncorrectable": "dram_uncorrectable",
    "SRAM Threshold Exceeded": "sram_threshold_exceeded",
    "Single Bit": ("single_bit", _BY_LOCATION),
    "Double Bit": ("double_bit", _BY_LOCATION),
}
_POWER: Labels = {
    "Power Draw": "power_draw",
    "Average Power Draw": "average_power_draw",
    "Instantaneous Power Draw": "instant_power_draw",
    "Power Limit": "power_limit",
    "Current Power Limit": "current_power_limit",
    "Requested Power Limit": "requested_power_limit",
    "Default Power Limit": "default_power_limit",
    "Enforced Power Limit": "enforced_power_limit",
    "Min Power Limit": "min_power_limit",
    "Max Power Limit": "max_power_limit",
    # Driver 610: the limits under a heading of their own.
    "GPU Ceiling Power Limit": INLINE,
}
_TEMPERATURE: Labels = {
    "GPU Current Temp": "gpu_temp",
    "GPU T.Limit Temp": "gpu_temp_tlimit",
    "GPU Current T.Limit Temp": "gpu_temp_tlimit",
    "GPU Shutdown Temp": "gpu_temp_max_threshold",
    "GPU Slowdown Temp": "gpu_temp_slow_threshold",
    "GPU Max Operating Temp": "gpu_temp_max_gpu_threshold",
    "GPU Shutdown T.Limit Temp": "gpu_temp_max_tlimit_threshold",
    "GPU Slowdown T.Limit Temp": "gpu_temp_slow_tlimit_threshold",
    "GPU Max Operating T.Limit Temp": "gpu_temp_max_gpu_tlimit_threshold",
    "GPU Target Temperature": "gpu_target_temperature",
    "Memory Current Temp": "memory_temp",
    "Memory Max Operating Temp": "gpu_temp_max_mem_threshold",
    "Memory Max Operating T.Limit Temp": "gpu_temp_max_mem_tlimit_threshold",
}
_MIG_DEVICE: Labels = {
    "Index": "index",
    "GPU Instance ID": "gpu_instance_id",
    "Compute Instance ID": "compute_instance_id",
    "FB Memory Usage": ("fb_memory_usage", _FB),
    "Shared FB Memory Usage": ("fb_memory_usage", _FB),
}
_PROCESS: Labels = {
    "GPU instance ID": "gpu_instance_id",
    "Compute instance ID": "compute_instance_id",
    "Process ID": "pid",
    "Type": "type",
    "Name": "process_name",
    "Used GPU Memory": "used_memory",
}
_GPU: Labels = {
    "Product Name": "product_name",
    "Product Brand": "product_brand",
    "Product Architecture": "product_architecture",
    "Persistence Mode": "persistence_mode",
    "GPU UUID": "uuid",
    "Minor Number": "minor_number",
    "Serial Number": "serial",
    "VBIOS Version": "vbios_version",
    "MIG Mode": ("mig_mode", {"Current": "current_mig", "Pending": "pending_mig"}),
    "PCI": ("pci", {
        "Bus Id": "pci_bus_id",
        "GPU Link Info": ("pci_gpu_link_info", {
            "PCIe Generation": ("pcie_gen", {
                "Max": "max_link_gen",
                "Current": "current_link_gen",
                "Device Current": "device_current_link_gen",
                "Device Max": "max_device_link_gen",
                "Host Max": "max_host_link_gen",
            }),
            "Link Width": ("link_widths", {"Max": "max_link_width",
                                           "Current": "current_link_width"}),
        }),
        "Replays Since Reset": "replay_counter",
        "Replay Number Rollovers": "replay_rollover_counter",
        "Tx Throughput": "tx_util",
        "Rx Throughput": "rx_util",
    }),
    "Fan Speed": "fan_speed",
    "Performance State": "performance_state",
    "Clocks Event Reasons": ("clocks_event_reasons", _reasons("clocks_event_reason_")),
    "Clocks Throttle Reasons": ("clocks_throttle_reasons", _reasons("clocks_throttle_reason_")),
    "Clocks Event Reasons Counters": ("clocks_event_reasons_counters", _REASON_COUNTERS),
    "FB Memory Usage": ("fb_memory_usage", _FB),
    "Compute Mode": "compute_mode",
    "Utilization": ("utilization", {
        "Gpu": "gpu_util", "GPU": "gpu_util", "Memory": "memory_util",
        "Encoder": "encoder_util", "Decoder": "decoder_util",
    }),
    "ECC Mode": ("ecc_mode", {"Current": "current_ecc", "Pending": "pending_ecc"}),
    "Ecc Mode": ("ecc_mode", {"Current": "current_ecc", "Pending": "pending_ecc"}),
    "ECC Errors": ("ecc_errors", {"Volatile": ("volatile", _ECC_COUNTS),
                                  "Aggregate": ("aggregate", _ECC_COUNTS)}),
    "Retired Pages": ("retired_pages", {
        "Single Bit ECC": "multiple_single_bit_retirement/retired_count",
        "Double Bit ECC": "double_bit_retirement/retired_count",
        "Pending Page Blacklist": "pending_blacklist",
        "Pending Page Retirement": "pending_retirement",
        "Pending": "pending_blacklist",
    }),
    "Remapped Rows": ("remapped_rows", {
        "Correctable Error": "remapped_row_corr",
        "Uncorrectable Error": "remapped_row_unc",
        "Pending": "remapped_row_pending",
        "Remapping Failure Occurred": "remapped_row_failure",
    }),
    "Temperature": ("temperature", _TEMPERATURE),
    "GPU Power Readings": ("gpu_power_readings", _POWER),
    "Power Readings": ("power_readings", _POWER),
    "Clocks": ("clocks", _CLOCKS),
    "Max Clocks": ("max_clocks", _CLOCKS),
}
_TOP: dict[str, str] = {
    "Timestamp": "timestamp",
    "Driver Version": "driver_version",
    "KMD Version": "driver_version",  # driver 610's name for it, read after "Driver Version"
    "CUDA Version": "cuda_version",
    "CUDA UMD Version": "cuda_version",
    "Attached GPUs": "attached_gpus",
}


# ----------------------------------------------------------------------------------------------
# Entry points


def looks_like_q_text(head: str) -> bool:
    """True for the first lines of `nvidia-smi -q` output (pasted with or without its banner)."""
    if _BANNER_LINE.search(head[:4096]):
        return True
    lines = [line.strip() for line in head.splitlines()[:60]]
    labels = {_split(line)[0] for line in lines}
    if any(_GPU_HEADER.fullmatch(line) for line in lines):
        return bool(labels & {"Product Name", "Driver Version", "Timestamp", "Attached GPUs"})
    # A fragment: sections of one GPU without the GPU line.
    return len(labels & _SECTIONS) >= 2


# Section headings only -q prints, for telling a pasted fragment of it.
_SECTIONS = frozenset({
    "Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Event Reasons Counters",
    "FB Memory Usage", "GPU Power Readings", "Power Readings", "ECC Errors", "Retired Pages",
    "Remapped Rows", "Max Clocks", "Performance State", "Product Name", "GPU UUID",
})


def parse_q_text(text: str, *, start: float = 0.0, interval: float = 1.0,
                 given: Collection[str] = ()) -> list[Snapshot]:
    """The Snapshots of one `nvidia-smi -q` output, one per moment, in file order.

    A moment without a readable `Timestamp` is timed `start + i * interval` (the first says so).
    Raises ValueError when no moment names a GPU."""
    snaps: list[Snapshot] = []
    skipped: list[str] = []
    untimed = False
    moments = list(_moments(text))
    for i, moment in enumerate(moments):
        root = _tree(moment)
        gpus = root.findall("gpu")
        if not gpus:
            skipped.append(f"the moment at line {moment.first_line} names no GPU; left out")
            continue
        stamp = root.findtext("timestamp")
        when = parse_timestamp(stamp) if stamp else None
        warnings = [*skipped, *moment.warnings]
        skipped = []
        if when is None and not untimed:
            untimed = True
            warnings.insert(0, "the text has no readable Timestamp line: "
                            + moments_taken(start, interval, given))
        snaps.append(read_log(root, time=start + i * interval if when is None else when,
                              warnings=warnings))
    if not snaps:
        raise ValueError("no GPU in the text: expected `nvidia-smi -q` output, which lists each "
                         "GPU under a line like 'GPU 00000000:18:00.0'")
    if skipped and snaps:
        snaps[-1] = _with_warnings(snaps[-1], skipped)
    return snaps


def _with_warnings(snap: Snapshot, more: list[str]) -> Snapshot:
    return dataclasses.replace(snap, warnings=(*snap.warnings, *more))


# ----------------------------------------------------------------------------------------------
# Lines -> nodes -> moments


@dataclass
class _Node:
    label: str
    value: str | None
    line: int
    children: list[_Node] = field(default_factory=list)


@dataclass
class _Moment:
    first_line: int
    nodes: list[_Node] = field(default_factory=list)  # the top level: header fields and GPUs
    unreachable: list[tuple[str, str]] = field(default_factory=list)  # (bus id, reason)
    warnings: list[str] = field(default_factory=list)


def _moments(text: str) -> Iterator[_Moment]:
    moment: _Moment | None = None
    stack: list[tuple[int, _Node]] = []
    pending_unreachable: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r").expandtabs(8).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if "NVSMI LOG" in line and _BANNER_LINE.fullmatch(line):
            if moment is not None and moment.nodes:
                yield moment
            moment = _Moment(number)
            moment.unreachable, pending_unreachable = pending_unreachable, []
            stack = []
            continue
        lost = UNREACHABLE_LINE.match(stripped) if stripped.startswith("Unable") else None
        if lost:
            where = moment.unreachable if moment is not None else pending_unreachable
            where.append((bus_id(lost.group("id")), lost.group("why").strip()))
            continue
        indent = len(line) - len(line.lstrip(" "))
        label, value = _split(stripped)
        node = _Node(label, value, number)
        if (not stack and node.value is None and not _GPU_HEADER.fullmatch(stripped)
                and node.label not in _GPU):
            continue  # not -q output: a prompt, a command, a pasted remark
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            if node.label == "Timestamp" and moment is not None and any(
                    n.label == "Timestamp" for n in moment.nodes):
                yield moment  # a loop pasted without its banners
                moment = None
            if moment is None:
                moment = _Moment(number)
                moment.unreachable, pending_unreachable = pending_unreachable, []
            moment.nodes.append(node)
        else:
            stack[-1][1].children.append(node)
        stack.append((indent, node))
    if moment is None and pending_unreachable:
        moment = _Moment(1)  # nothing but "Unable to determine the device handle ..." lines
    if moment is not None:
        moment.unreachable += pending_unreachable
        if moment.nodes or moment.unreachable:
            yield moment


def _split(line: str) -> tuple[str, str | None]:
    """("Product Name", "NVIDIA H100") for "Product Name   : NVIDIA H100"; (line, None) for a
    section heading."""
    label, sep, value = line.partition(_SEPARATOR)
    if not sep:
        return line, None
    return label.rstrip(), value.strip()


def bus_id(text: str) -> str:
    """nvidia-smi prints "0000:02:00.0" in that line and "00000000:02:00.0" elsewhere."""
    domain, sep, rest = text.partition(":")
    return f"{int(domain, 16):08X}:{rest.upper()}" if sep and rest else text


# ----------------------------------------------------------------------------------------------
# Nodes -> the -q -x element tree


def _tree(moment: _Moment) -> ET.Element:
    root = ET.Element("nvidia_smi_log")
    gpus: list[ET.Element] = []
    # Sections of one GPU pasted without their "GPU 00000000:..." line (`-q -d PERFORMANCE`
    # cut to what the ticket is about) are that GPU's.
    loose = [n for n in moment.nodes if n.label in _GPU and n.label not in _TOP]
    if loose:
        gpu = ET.Element("gpu")
        _fill(gpu, loose, _GPU, moment.warnings)
        gpus.append(gpu)
    for node in moment.nodes:
        header = _GPU_HEADER.fullmatch(node.label) if node.value is None else None
        if header:
            gpu = ET.Element("gpu", id=header.group("id"))
            _fill(gpu, node.children, _GPU, moment.warnings)
            gpus.append(gpu)
        elif node.label in _TOP and node.value is not None:
            value = _DEPRECATED.sub("", node.value)
            existing = root.find(_TOP[node.label])
            if existing is None:
                ET.SubElement(root, _TOP[node.label]).text = value
            elif value and not node.label.startswith(("Driver", "CUDA Version")):
                existing.text = value  # the KMD / UMD names win over the deprecated ones
    for bus, why in moment.unreachable:
        add_unreachable(gpus, bus, why)
    root.extend(gpus)
    return root


def add_unreachable(gpus: list[ET.Element], bus: str, why: str) -> None:
    """Puts a GPU nvidia-smi could not open among `gpus`, in PCI bus order as NVML numbers
    them."""
    lost = ET.Element("gpu", {"id": bus, UNREACHABLE: why})
    after = [i for i, g in enumerate(gpus) if _bus_key(g.get("id", "")) < _bus_key(bus)]
    gpus.insert(after[-1] + 1 if after else 0, lost)


def _bus_key(bus: str) -> tuple[int, str]:
    domain, _, rest = bus.partition(":")
    try:
        return int(domain, 16), rest.upper()
    except ValueError:
        return 0, bus.upper()


_DEPTH = 12  # -q nests 5 deep; a deeper text is not -q output, and is not followed


def _fill(parent: ET.Element, nodes: list[_Node], labels: Labels, warnings: list[str],
          depth: int = 0) -> None:
    if depth > _DEPTH:
        return
    if parent.tag == "processes":
        _fill_processes(parent, nodes, warnings)
        return
    for node in nodes:
        how = labels.get(node.label)
        if node.label == "MIG Device" and parent.tag == "gpu":
            mig = ET.SubElement(child(parent, "mig_devices"), "mig_device")
            _fill(mig, node.children, _MIG_DEVICE, warnings, depth + 1)
            continue
        if node.label == "Processes" and parent.tag == "gpu":
            _fill(child(parent, "processes"), node.children, {}, warnings, depth + 1)
            continue
        if how is None:
            continue
        if how == INLINE:
            _fill(parent, node.children, labels, warnings, depth + 1)
            continue
        tag, sub = (how, labels) if isinstance(how, str) else how
        el = child(parent, tag)
        if node.value is not None and not (node.children and not isinstance(how, str)):
            el.text = node.value  # "Remapped Rows : N/A" prints one text for the section
        if node.children:
            # A value with children under it ("HW Slowdown" and its two kinds) lists the
            # children beside it, as -q -x does.
            _fill(parent if isinstance(how, str) else el, node.children, sub, warnings,
                  depth + 1)


def _fill_processes(parent: ET.Element, nodes: list[_Node], warnings: list[str]) -> None:
    """-q lists a process as "GPU instance ID", "Compute instance ID" (from driver 450) and
    "Process ID" with its Type, Name and Used GPU Memory under it."""
    ids: dict[str, str] = {}
    for node in nodes:
        tag = _PROCESS.get(node.label)
        if tag in ("gpu_instance_id", "compute_instance_id") and node.value is not None:
            ids[str(tag)] = node.value
        elif tag == "pid" and node.value is not None and not node.value.isdigit():
            warnings.append(f"line {node.line} skipped: unreadable process id {node.value!r}")
            ids = {}
        elif tag == "pid" and node.value is not None:
            info = ET.SubElement(parent, "process_info")
            for k, v in ids.items():
                ET.SubElement(info, k).text = v
            ids = {}
            ET.SubElement(info, "pid").text = node.value
            for item in node.children:
                item_tag = _PROCESS.get(item.label)
                if isinstance(item_tag, str) and item.value is not None:
                    ET.SubElement(info, item_tag).text = item.value


def child(parent: ET.Element, path: str) -> ET.Element:
    el = parent
    for tag in path.split("/"):
        found = el.find(tag)
        el = found if found is not None else ET.SubElement(el, tag)
    return el
