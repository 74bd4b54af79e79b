"""Read `rocm-smi --json` outputs (`-a`/`--showallinfo` or any selection) into Snapshots.

One JSON object is one moment: `{"card0": {...}, "card1": {...}, "system": {...}}`. A file may
hold one object or many, one a line (`rocm-smi --json` in a loop), or pretty-printed one after
another. rocm-smi prints no time, so moment i is at `start + i * interval` and the first Snapshot
says so. Text that is not a readable object (a truncated last line, a warning rocm-smi printed
before its JSON) is skipped with a warning.

Keys changed between ROCm releases (4.3 to 6.x) and are looked up with fallbacks. Fields map as
the amdsmi source maps them (sources/amd.py): "GPU use (%)" is the GFX activity, "GPU memory use
(%)" (6.1+: "GPU Memory Read/Write Activity (%)") the memory-controller activity; the hotspot
("junction") sensor is the GPU temperature, the edge sensor when there is none; "Max Graphics
Package Power (W)" is the power cap; free memory is total minus used. rocm-smi prints "N/A" (and
"N/A (Secondary die)") for what a GPU lacks: "unsupported". Processes ("PID<n>" in the system
block: name, number of GPUs, VRAM bytes, ...) say how many GPUs a process uses but not which, so
they are attached only when the node has one GPU.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from gputop.importers.timing import moments_taken
from gputop.model import (
    DeviceSample,
    HostSample,
    Missing,
    ProcessSample,
    Snapshot,
    SystemInfo,
    mark_all,
)

NOT_IN_FILE = "not in rocm-smi output"
ABSENT = Missing("unsupported", detail=NOT_IN_FILE)
_ALL_ABSENT = dict.fromkeys(DeviceSample._measured, ABSENT)
_PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # GT/s -> generation
_CARD = re.compile(r"card(\d+)")
_MHZ = re.compile(r"\(?(\d+(?:\.\d+)?)\s*Mhz\)?", re.IGNORECASE)
_LINK = re.compile(r"(\d+(?:\.\d+)?)GT/s x(\d+)")
_HOST_FIELDS = ("sm_util", "mem_util", "user", "cmdline", "cpu_percent", "rss", "create_time")
_HOST_ABSENT: dict[str, Any] = dict.fromkeys(_HOST_FIELDS, ABSENT)


def looks_like_rocm_smi(text: str) -> bool:
    """True when one of the first lines opens a JSON object that has rocm-smi's keys."""
    head = text[:8192]
    return (re.search(r"^\{", head, re.MULTILINE) is not None
            and re.search(r'"card\d+"\s*:\s*\{', head) is not None)


def parse_rocm_smi_json(text: str, *, start: float = 0.0, interval: float = 1.0,
                        given: Collection[str] = ()) -> list[Snapshot]:
    """The Snapshots of one rocm-smi JSON output or log, in file order. Raises ValueError when
    the text holds no rocm-smi object."""
    snaps: list[Snapshot] = []
    skipped: list[str] = []
    for item in _objects(text):
        if isinstance(item, str):
            skipped.append(item)
            continue
        if not any(_CARD.fullmatch(k) for k in item):
            skipped.append("a JSON object without any cardN key skipped")
            continue
        when = start + len(snaps) * interval
        untimed = "rocm-smi prints no times: " + moments_taken(start, interval, given)
        warnings = ([untimed] if not snaps else []) + skipped
        snaps.append(_snapshot(item, when, warnings))
        skipped = []
    if not snaps:
        raise ValueError("no rocm-smi JSON object (with card0, card1, ... keys) in the text")
    if skipped:
        last = snaps[-1]
        snaps[-1] = Snapshot(time=last.time, system=last.system, host=last.host,
                             devices=last.devices, processes=last.processes,
                             warnings=last.warnings + tuple(skipped))
    return snaps


def _objects(text: str) -> Iterator[dict[str, Any] | str]:
    """Each top-level JSON object in the text; a string says what was skipped instead."""
    decoder = json.JSONDecoder()
    pos, n = 0, len(text)
    while pos < n:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            return
        line = text.count("\n", 0, pos) + 1
        if text[pos] == "{":
            try:
                obj, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                yield f"line {line} skipped: not readable JSON ({e.msg})"
            else:
                if isinstance(obj, dict):
                    yield obj
                pos = end
                continue
        else:
            yield f"line {line} skipped: not a JSON object"
        # Resume at the next line that opens an object.
        nxt = text.find("\n{", pos)
        pos = n if nxt < 0 else nxt + 1


# ----------------------------------------------------------------------------------------------
# One object -> one Snapshot


def _snapshot(obj: Mapping[str, Any], when: float, warnings: list[str]) -> Snapshot:
    cards = sorted((int(m.group(1)), v) for k, v in obj.items()
                   if (m := _CARD.fullmatch(k)) and isinstance(v, dict))
    system: Mapping[str, Any] = obj["system"] if isinstance(obj.get("system"), dict) else {}
    devices = [_device(index, card) for index, card in cards]
    processes, note = _processes(system, [index for index, _ in cards])
    if note:
        warnings = [*warnings, note]
    return Snapshot(
        time=when,
        system=SystemInfo(
            backends=("rocm-smi",),
            driver_version=_text(system.get("Driver version")),
            cuda_version=Missing("unsupported", detail="AMD GPU"),
            nvml_version=Missing("unsupported", detail="AMD GPU"),
            rocm_version=ABSENT,
        ),
        host=mark_all(HostSample(), ABSENT),
        devices=tuple(devices),
        processes=tuple(processes),
        warnings=tuple(warnings),
    )


def _device(index: int, card: Mapping[str, Any]) -> DeviceSample:
    def get(*keys: str) -> Any:
        """The first of `keys` that this card has a value for; else its "N/A"; else ABSENT."""
        found: Any = ABSENT
        for key in keys:
            if key in card:
                v = _clean(card[key])
                if not isinstance(v, Missing):
                    return v
                if found is ABSENT:
                    found = v
        return found

    total = _number(get("VRAM Total Memory (B)"))
    used = _number(get("VRAM Total Used Memory (B)"))
    free: int | Missing
    if isinstance(total, Missing):
        free = total
    elif isinstance(used, Missing):
        free = used
    else:
        free = round(total - used)
    link = _link(get("pcie clock level"))
    energy = _number(get("Accumulated Energy (uJ)"))
    f: dict[str, Any] = dict(_ALL_ABSENT)
    f.update(
        util_gpu=_number(get("GPU use (%)")),
        util_mem=_number(get("GPU Memory Read/Write Activity (%)", "GPU memory use (%)")),
        mem_total=_whole(total),
        mem_used=_whole(used),
        mem_free=free,
        temp_gpu=_number(get("Temperature (Sensor junction) (C)",
                             "Temperature (Sensor edge) (C)")),
        temp_mem=_number(get("Temperature (Sensor memory) (C)")),
        power_draw=_number(get("Average Graphics Package Power (W)",
                               "Current Socket Graphics Package Power (W)")),
        power_limit=_number(get("Max Graphics Package Power (W)")),
        energy_j=energy if isinstance(energy, Missing) else energy / 1e6,
        clock_sm=_clock(get("sclk clock speed:")),
        clock_mem=_clock(get("mclk clock speed:")),
        clock_sm_max=_range_top(get("Valid sclk range")),
        clock_mem_max=_range_top(get("Valid mclk range")),
        fan=_number(get("Fan speed (%)")),
        pcie_gen=link[0],
        pcie_width=link[1],
        pcie_replays=_whole(_number(get("PCIe Replay Count"))),
        compute_capability=get("GFX Version"),
        numa_node=_whole(_number(get("(Topology) Numa Node"))),
        # amdsmi offers none of these either.
        pstate=Missing("unsupported", detail="AMD GPU"),
        mem_reserved=Missing("unsupported", detail="AMD GPU"),
        mig_enabled=Missing("unsupported", detail="AMD GPU"),
    )
    name = get("Device Name", "Card Series", "Card series")
    if isinstance(name, Missing) or re.fullmatch(r"0x[0-9a-fA-F]+", str(name)):
        gpu_id = get("Device ID", "GPU ID")
        name = f"AMD GPU {gpu_id}" if isinstance(gpu_id, str) else "AMD GPU"
    uuid = get("Unique ID")
    bus = get("PCI Bus")
    return DeviceSample(
        index=index,
        vendor="amd",
        name=str(name),
        uuid=uuid if isinstance(uuid, str) else "",
        pci_bus_id=bus.lower() if isinstance(bus, str) else "",
        **f,
    )


def _processes(system: Mapping[str, Any], gpus: list[int]) -> tuple[list[ProcessSample], str]:
    out: list[ProcessSample] = []
    ambiguous = 0
    for key, value in system.items():
        if not (key.startswith("PID") and key[3:].isdigit()) or not isinstance(value, str):
            continue
        parts = [p.strip() for p in value.split(",")]
        if len(parts) < 3 or not parts[1].isdigit() or parts[1] == "0":
            continue  # on no GPU
        if len(gpus) != 1:
            ambiguous += 1
            continue
        vram = _number(_clean(parts[2]))
        out.append(ProcessSample(
            pid=int(key[3:]), device_index=gpus[0], kind="compute",
            gpu_mem=_whole(vram), name=parts[0] or ABSENT,
            **_HOST_ABSENT))
    note = (f"{ambiguous} processes left out: rocm-smi does not say which of the "
            f"{len(gpus)} GPUs they use") if ambiguous else ""
    return out, note


# ----------------------------------------------------------------------------------------------
# Values


def _clean(v: Any) -> Any:
    """A value as rocm-smi printed it, or why there is none."""
    if v is None:
        return ABSENT
    if not isinstance(v, str):
        return str(v)
    v = v.strip()
    if not v:
        return Missing("unsupported", detail="empty in rocm-smi output")
    if v.upper().startswith("N/A"):
        rest = v[3:].strip(" ()")
        return Missing("unsupported", detail=rest) if rest else Missing("unsupported")
    return v


def _unreadable(v: Any) -> Missing:
    return Missing("error", detail=f"cannot read {v!r}")


def _number(v: Any) -> float | Missing:
    if isinstance(v, Missing):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return _unreadable(v)


def _whole(v: float | Missing) -> int | Missing:
    return v if isinstance(v, Missing) else round(v)


def _clock(v: Any) -> int | Missing:
    """"(1725Mhz)" -> 1725."""
    if isinstance(v, Missing):
        return v
    m = _MHZ.fullmatch(v)
    return round(float(m.group(1))) if m else _unreadable(v)


def _range_top(v: Any) -> int | Missing:
    """"500Mhz - 1700Mhz" -> 1700."""
    if isinstance(v, Missing):
        return v
    top = v.rpartition("-")[2].strip()
    m = _MHZ.fullmatch(top)
    return round(float(m.group(1))) if m else _unreadable(v)


def _link(v: Any) -> tuple[int | Missing, int | Missing]:
    """"1 (16.0GT/s x16)" -> (4, 16): PCIe generation and width of the current link level."""
    if isinstance(v, Missing):
        return v, v
    m = _LINK.search(v)
    if m is None:
        return _unreadable(v), _unreadable(v)
    gen = _PCIE_GEN.get(float(m.group(1)))
    return (gen if gen is not None else _unreadable(v)), int(m.group(2))


def _text(v: Any) -> str | Missing:
    v = _clean(v)
    return v if isinstance(v, (str, Missing)) else str(v)
