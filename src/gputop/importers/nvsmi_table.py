"""Read the default `nvidia-smi` table (the boxed one; one moment, or many from `nvidia-smi -l N`)
into Snapshots.

Each moment is turned into the element tree `nvidia-smi -q -x` would print for the values the table
shows, and read by the XML importer, as the plain `-q` text is: a value comes out as it comes out
of `-q` or `-q -x` of the same moment, to the table's precision (it prints whole watts and MiB).
The table shows, per GPU: index, name (cut to fit, ending in "..."), persistence mode, bus id,
volatile uncorrected ECC errors (or "On"/"Off" where it shows only the mode), fan, temperature,
performance state, power draw and enforced limit, memory used and total, utilization, MIG mode;
the MIG devices with their memory; and the processes with their memory. Every other field is
`Missing("unsupported")` with the detail `NOT_IN_FILE`. "ERR!" is `Missing("error")`.

The date line nvidia-smi prints above the box is the moment's time; a table pasted without it is
timed from --start and --interval. A GPU nvidia-smi could not open ("Unable to determine the
device handle for GPU ...") is marked lost, as in the `-q` importer.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from gputop.importers.nvsmi_text import UNREACHABLE_LINE, add_unreachable, bus_id, child
from gputop.importers.nvsmi_xml import parse_timestamp, read_log
from gputop.importers.timing import moments_taken
from gputop.model import Snapshot

_DATE = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]?\d \d{1,2}:\d{2}:\d{2} \d{4}")
_VERSION = re.compile(r"(?:Driver|KMD) Version:\s*(?P<driver>\S+)"
                      r"|CUDA (?:UMD )?Version:\s*(?P<cuda>\S+)")
_PERSISTENCE = {"On": "Enabled", "Off": "Disabled"}


def looks_like_table(head: str) -> bool:
    """True for the first lines of the default `nvidia-smi` output."""
    return bool(re.search(r"^\s*\|\s*NVIDIA-SMI \S+", head[:8192], re.MULTILINE))


def parse_table(text: str, *, start: float = 0.0, interval: float = 1.0,
                given: Collection[str] = ()) -> list[Snapshot]:
    """The Snapshots of one default `nvidia-smi` output, one per table, in file order. A table
    without its date line is timed `start + i * interval`. Raises ValueError when no table lists
    a GPU."""
    snaps = []
    untimed = False
    for i, moment in enumerate(_moments(text)):
        root = moment.tree()
        if not root.findall("gpu"):
            continue
        warnings = list(moment.warnings)
        when = parse_timestamp(moment.date) if moment.date else None
        if when is None and not untimed:
            untimed = True
            warnings.insert(0, "the table has no date line above it: "
                            + moments_taken(start, interval, given))
        snaps.append(read_log(root, time=start + i * interval if when is None else when,
                              warnings=warnings))
    if not snaps:
        raise ValueError("no GPU in the table: expected the output of `nvidia-smi`, a box "
                         "with a row per GPU under 'GPU  Name ... Bus-Id'")
    return snaps


# ----------------------------------------------------------------------------------------------
# One table


@dataclass
class _Moment:
    date: str | None = None
    driver: str | None = None
    cuda: str | None = None
    gpus: dict[str, list[list[str]]] = field(default_factory=dict)  # printed index -> rows
    mig: list[list[str]] = field(default_factory=list)  # first row of each MIG device
    processes: list[tuple[list[str], bool]] = field(default_factory=list)  # (tokens, GI/CI?)
    unreachable: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    started: bool = False  # its NVIDIA-SMI line was seen

    def tree(self) -> ET.Element:
        root = ET.Element("nvidia_smi_log")
        for tag, value in (("timestamp", self.date), ("driver_version", self.driver),
                           ("cuda_version", self.cuda)):
            if value is not None:
                ET.SubElement(root, tag).text = value
        by_index: dict[str, ET.Element] = {}
        gpus = []
        for index, rows in self.gpus.items():
            gpu = _gpu(rows)
            if gpu is None:
                self.warnings.append(f"GPU {index}: its rows cannot be read; left out")
                continue
            by_index[index] = gpu
            gpus.append(gpu)
        for cells in self.mig:
            _mig_device(by_index, cells)
        for tokens, instances in self.processes:
            _process(by_index, tokens, instances, self.warnings)
        for bus, why in self.unreachable:
            add_unreachable(gpus, bus, why)
        root.extend(gpus)
        return root


def _moments(text: str) -> Iterator[_Moment]:
    moment = _Moment()
    section = ""  # "gpus", "mig", "processes" once past its "===" line; "head:..." before
    block: list[list[str]] | None = None
    unreachable: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r").expandtabs(8).strip()
        if not line:
            continue
        if _DATE.fullmatch(line):
            if moment.started:
                yield moment
                moment, section = _Moment(), ""
            moment.date = line
            continue
        lost = UNREACHABLE_LINE.match(line)
        if lost:
            unreachable.append((bus_id(lost.group("id")), lost.group("why").strip()))
            continue
        if not line.startswith(("|", "+")):
            continue  # a prompt, a command, a remark
        if line.startswith("+"):
            block = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        joined = " ".join(cells)
        if joined.startswith("NVIDIA-SMI"):
            if moment.started:
                yield moment
                moment = _Moment()
            moment.started = True
            moment.unreachable, unreachable = unreachable, []
            for m in _VERSION.finditer(line):
                if m.group("driver"):
                    moment.driver = m.group("driver")
                if m.group("cuda"):
                    moment.cuda = m.group("cuda")
            section = ""
            continue
        if set(line) <= set("|=+"):
            section = section.removeprefix("head:")
            continue
        if joined.startswith("GPU") and "Name" in joined and "Bus-Id" in joined:
            section = "head:gpus"
        elif joined.startswith("MIG devices:"):
            section = "head:mig"
        elif joined.startswith("Processes:"):
            section = "head:processes"
        elif section == "head:processes" and joined.startswith("GPU"):
            section = "head:processes+gi" if " GI " in f" {joined} " else "head:processes"
        elif section == "gpus":
            if block is None:
                block = []
                index = cells[0].split()[0] if cells[0].split() else "?"
                moment.gpus[index] = block
            block.append(cells)
        elif section == "mig":
            if block is None:
                block = []
                moment.mig.append(cells)
        elif section in ("processes", "processes+gi") and not joined.startswith("No running"):
            moment.processes.append((line.strip("|").split(), section.endswith("+gi")))
    moment.unreachable += unreachable
    if moment.started or moment.unreachable:
        yield moment


# ----------------------------------------------------------------------------------------------
# Rows -> elements


def _value(text: str) -> str:
    """A table cell as -q -x prints it: "ERR!" is NVML's error, like "[Unknown Error]"."""
    return f"[{text}]" if text == "ERR!" else text


_SLASH = re.compile(r"\s+/\s+")


def _halves(cell: str) -> tuple[str, str]:
    """"19818MiB /  81559MiB" -> ("19818MiB", "81559MiB"): split at the last " / " (a value
    may itself be "N/A")."""
    parts = _SLASH.split(cell.strip())
    if len(parts) < 2:
        return cell.strip(), ""
    return " / ".join(parts[:-1]), parts[-1]


def _gpu(rows: list[list[str]]) -> ET.Element | None:
    if len(rows) < 2 or min(len(r) for r in rows[:2]) < 3:
        return None
    first, second = rows[0], rows[1]
    head = first[0].split()
    place = first[1].split()
    if len(head) < 2 or not place:
        return None
    gpu = ET.Element("gpu", id=bus_id(place[0]))
    name = first[0].strip()[len(head[0]):].strip()
    persistence = head[-1]
    if persistence in _PERSISTENCE or persistence in ("WDDM", "TCC", "N/A"):
        name = name[: -len(persistence)].strip()
        _put(gpu, "persistence_mode", _PERSISTENCE.get(persistence))
    _put(gpu, "product_name", name)
    _put(gpu, "pci/pci_bus_id", bus_id(place[0]))
    ecc = first[2]
    if ecc in ("On", "Off"):  # MIG on, or ECC off: the mode, not a count
        _put(gpu, "ecc_mode/current_ecc", "Enabled" if ecc == "On" else "Disabled")
    elif ecc:
        _put(gpu, "ecc_errors/volatile/double_bit/total", _value(ecc))
        if ecc[:1].isdigit():
            _put(gpu, "ecc_mode/current_ecc", "Enabled")  # counts show only with ECC on
    left, cap = _halves(second[0])  # "N/A   30C    P0   100W /  700W", "... N/A /  N/A"
    gauges = left.split()
    if len(gauges) >= 4:
        _put(gpu, "fan_speed", _value(gauges[0]))
        _put(gpu, "temperature/gpu_temp", _value(gauges[1]))
        _put(gpu, "performance_state", _value(gauges[2]))
        _put(gpu, "gpu_power_readings/power_draw", _value(gauges[-1]))
        _put(gpu, "gpu_power_readings/current_power_limit", _value(cap.strip()))
    used, total = _halves(second[1])
    _put(gpu, "fb_memory_usage/used", _value(used))
    _put(gpu, "fb_memory_usage/total", _value(total))
    util = second[2].split()
    if util:
        _put(gpu, "utilization/gpu_util", _value(util[0]))
    if len(rows) > 2 and len(rows[2]) >= 3 and rows[2][2]:
        _put(gpu, "mig_mode/current_mig", _value(rows[2][2]))
    return gpu


def _mig_device(gpus: dict[str, ET.Element], cells: list[str]) -> None:
    ids = cells[0].split()
    gpu = gpus.get(ids[0]) if len(ids) >= 3 else None
    if gpu is None or len(cells) < 2:
        return
    mig = ET.SubElement(child(gpu, "mig_devices"), "mig_device")
    _put(mig, "gpu_instance_id", ids[1])
    _put(mig, "compute_instance_id", ids[2])
    used, total = _halves(cells[1])
    _put(mig, "fb_memory_usage/used", _value(used))
    _put(mig, "fb_memory_usage/total", _value(total))


def _process(gpus: dict[str, ET.Element], tokens: list[str], instances: bool,
             warnings: list[str]) -> None:
    """"0 N/A N/A 11327 C /root/tools/memhog 2566MiB" (GI and CI from driver 450 on)."""
    width = 6 if instances else 4  # gpu [gi ci] pid type ... memory
    if len(tokens) < width or not tokens[width - 3].isdigit():
        warnings.append(f"a process row cannot be read: {' '.join(tokens)!r}")
        return
    gpu = gpus.get(tokens[0])
    if gpu is None:
        warnings.append(f"a process on GPU {tokens[0]}, which the table does not list; "
                        "left out")
        return
    info = ET.SubElement(child(gpu, "processes"), "process_info")
    rest = tokens[1:]
    if instances:
        _put(info, "gpu_instance_id", rest[0])
        _put(info, "compute_instance_id", rest[1])
        rest = rest[2:]
    _put(info, "pid", rest[0])
    _put(info, "type", rest[1])
    _put(info, "process_name", " ".join(rest[2:-1]))
    _put(info, "used_memory", _value(rest[-1]))


def _put(parent: ET.Element, path: str, text: str | None) -> None:
    if text:
        child(parent, path).text = text
