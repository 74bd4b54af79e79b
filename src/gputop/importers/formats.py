"""Which importer reads a file, and how the files of one import become one run.

`sniff` tells the kind of a file from its first lines. `import_logs` parses every file (with its
sniffed kind, or the one forced with --format), puts the moments in time order, and attaches
the processes of pmon logs to the devices of the log they were taken with. No I/O here: the
caller reads the files and writes the recording.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gputop.errors import GputopError
from gputop.importers import nvsmi_csv
from gputop.importers.nvsmi_dmon import parse_dmon
from gputop.importers.nvsmi_pmon import parse_pmon
from gputop.importers.nvsmi_table import looks_like_table, parse_table
from gputop.importers.nvsmi_text import looks_like_q_text, parse_q_text
from gputop.importers.nvsmi_xml import parse_nvsmi_xml
from gputop.importers.rocm_smi import looks_like_rocm_smi, parse_rocm_smi_json
from gputop.importers.timing import INTERVAL, START
from gputop.model import Snapshot, Topology

# --format name -> what writes it.
FORMATS = {
    "xml": "nvidia-smi -q -x",
    "q": "nvidia-smi -q",
    "table": "nvidia-smi",
    "csv": "nvidia-smi --query-gpu=... --format=csv",
    "dmon": "nvidia-smi dmon",
    "pmon": "nvidia-smi pmon",
    "rocm-smi": "rocm-smi --json",
}
_DMON_COLUMNS = {"pwr", "gtemp", "temp", "mtemp", "sm", "mclk", "pclk", "fb", "rxpci", "sbecc",
                 "pviol"}
_CSV_STAMP = re.compile(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}")
# A value as `--query-gpu` prints it: "45 %", "81559 MiB", "[N/A]", "P0", a UUID, a bus id, ...
_CSV_VALUE = re.compile(
    r"-?\d+(?:\.\d+)?(?: ?(?:%|[KMG]iB|W|MHz|C|us))?|\[[^\]]*\]|N/A|P\d{1,2}|GPU-[0-9a-fA-F-]+"
    r"|[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]|0x[0-9A-Fa-f]+"
    r"|Enabled|Disabled|Active|Not Active|Yes|No|Default|\d{4}/\d{2}/\d{2} [\d:.]+")


@dataclass(frozen=True)
class Imported:
    snapshots: list[Snapshot]
    format: str  # the --format names of the files, "+"-joined: "dmon+pmon"
    warnings: list[str]  # "FILE: what", each once


def accepted() -> str:
    """The formats, for messages: "nvidia-smi -q -x (xml), ..."."""
    return ", ".join(f"{what} ({name})" for name, what in FORMATS.items())


def sniff(text: str) -> str | None:
    """The --format name of a file from its first lines, or None when it is none of them.
    "compute-apps" for a `--query-compute-apps` CSV, which gputop does not import."""
    head = text[:65536].lstrip("\ufeff \t\r\n")
    if head.startswith(("<?xml", "<nvidia_smi_log", "<!DOCTYPE nvidia_smi_log")):
        return "xml"
    if looks_like_rocm_smi(head):
        return "rocm-smi"
    if looks_like_q_text(head):
        return "q"
    if looks_like_table(head):
        return "table"
    lines = [line.strip() for line in head.splitlines()[:50] if line.strip()]
    for line in lines:
        if line.startswith("#"):
            names = set(line[1:].lower().split())
            if "gpu" in names and "pid" in names:
                return "pmon"
            if "gpu" in names and names & _DMON_COLUMNS:
                return "dmon"
            continue
        if nvsmi_csv.is_header(line):
            names = {nvsmi_csv.field_name(c)[0] for c in line.split(",")}
            return "compute-apps" if "pid" in names else "csv"
        if "," in line and (_CSV_STAMP.match(line) or _csv_values(line)):
            return "csv"  # written with `noheader`
        return None
    return None


def _csv_values(line: str) -> bool:
    """A line of `--query-gpu` values: several cells, most of them as nvidia-smi prints values."""
    cells = [c.strip() for c in line.split(",")]
    return len(cells) >= 2 and 2 * sum(bool(_CSV_VALUE.fullmatch(c)) for c in cells) > len(cells)


def parse(fmt: str, text: str, *, start: float = 0.0, interval: float = 1.0,
          query_gpu: Sequence[str] | None = None, given: Collection[str] = ()) -> list[Snapshot]:
    """The Snapshots of one file of the format `fmt`. `start` and `interval` time a log without
    times; `given` names those of --start and --interval the user set, for its warning. Raises
    ValueError on unreadable input."""
    if fmt == "xml":
        return [parse_nvsmi_xml(text)]
    if fmt == "q":
        return parse_q_text(text, start=start, interval=interval, given=given)
    if fmt == "table":
        return parse_table(text, start=start, interval=interval, given=given)
    if fmt == "csv":
        return nvsmi_csv.parse_query_gpu_csv(text, fields=query_gpu, start=start,
                                             interval=interval, given=given)
    if fmt == "dmon":
        return parse_dmon(text, start=start, interval=interval, given=given)
    if fmt == "pmon":
        return parse_pmon(text, start=start, interval=interval, given=given)
    if fmt == "rocm-smi":
        return parse_rocm_smi_json(text, start=start, interval=interval, given=given)
    raise ValueError(f"unknown format {fmt!r}")


def import_logs(files: Sequence[tuple[str, str]], *, fmt: str = "auto",
                start: float | None = None, interval: float | None = None,
                query_gpu: Sequence[str] | None = None,
                topology: Topology | None = None) -> Imported:
    """One run from the files (name, text) given, in that order.

    Files of one kind without times continue one another: each starts an interval after the
    previous one ended. `start` (default 0) and `interval` (default 1 s) time them; None is
    "not given". Device logs must all be of one kind; pmon logs may join any of them. Raises
    GputopError, naming the file, for a file that cannot be imported."""
    given = [flag for flag, v in ((START, start), (INTERVAL, interval)) if v is not None]
    start = 0.0 if start is None else start
    interval = 1.0 if interval is None else interval
    if interval <= 0:
        raise GputopError("--interval must be greater than 0")
    device_snaps: list[Snapshot] = []
    process_snaps: list[Snapshot] = []
    kinds: list[str] = []
    resume: dict[str, float] = {}
    warnings: dict[str, None] = {}
    for name, text in files:
        kind = _kind(name, text, fmt, query_gpu)
        try:
            snaps = parse(kind, text, start=resume.get(kind, start), interval=interval,
                          query_gpu=query_gpu, given=given)
        except ValueError as e:
            raise GputopError(f"{name}: {e}") from None
        resume[kind] = max(s.time for s in snaps) + interval
        for s in snaps:
            warnings.update(dict.fromkeys(f"{name}: {w}" for w in s.warnings))
        (process_snaps if kind == "pmon" else device_snaps).extend(snaps)
        if kind not in kinds:
            kinds.append(kind)
    device_kinds = [k for k in kinds if k != "pmon"]
    if len(device_kinds) > 1:
        raise GputopError(f"the files mix {' and '.join(device_kinds)} logs: import one kind "
                          "at a time (pmon logs may go with any of them)")
    if device_snaps and process_snaps:
        snaps, unmatched = _attach_processes(device_snaps, process_snaps, interval)
        if unmatched:
            warnings[f"{unmatched} pmon moments fall at no time of the device log; their "
                     "processes are left out (check --start and --interval)"] = None
    else:
        snaps = sorted(device_snaps or process_snaps, key=lambda s: s.time)
    if topology is not None:
        gpus = max((len(s.devices) for s in snaps), default=0)
        if gpus and len(topology.matrix) != gpus:
            warnings[f"the --topo matrix has {len(topology.matrix)} GPUs but the logs show "
                     f"{gpus}: is it of the same machine? (attached as given)"] = None
        snaps = [dataclasses.replace(s, topology=topology) for s in snaps]
    return Imported(snaps, "+".join(kinds), list(warnings))


def _kind(name: str, text: str, fmt: str, query_gpu: Sequence[str] | None) -> str:
    if fmt != "auto":
        if fmt not in FORMATS:
            raise GputopError(f"unknown --format {fmt!r}: use one of {', '.join(FORMATS)}")
        return fmt
    kind = sniff(text)
    if kind is None and query_gpu and "," in text:
        kind = "csv"
    if kind == "compute-apps":
        raise GputopError(f"{name} is a --query-compute-apps log, which gputop does not import: "
                          "for processes, record `nvidia-smi pmon` alongside")
    if kind is None:
        raise GputopError(f"{name}: not a log gputop can import; it reads {accepted()} "
                          "outputs (--format forces one)")
    return kind


def _attach_processes(devices: list[Snapshot], processes: list[Snapshot],
                      interval: float) -> tuple[list[Snapshot], int]:
    """Device snapshots with the processes of the pmon moment nearest each (within half an
    interval); and how many pmon moments matched none."""
    devices = sorted(devices, key=lambda s: s.time)
    times = [s.time for s in devices]
    taken: dict[int, Snapshot] = {}
    unmatched = 0
    for p in sorted(processes, key=lambda s: s.time):
        i = bisect.bisect_left(times, p.time)
        near = [j for j in (i - 1, i) if 0 <= j < len(times)]
        j = min(near, key=lambda j: abs(times[j] - p.time), default=None)
        if j is None or abs(times[j] - p.time) >= interval / 2 or j in taken:
            unmatched += 1
        else:
            taken[j] = p
    out = [dataclasses.replace(s, processes=taken[j].processes,
                               warnings=s.warnings + taken[j].warnings)
           if j in taken else s for j, s in enumerate(devices)]
    return out, unmatched


def parse_start(text: str) -> float:
    """--start: "2024-05-01T12:00:00" (UTC unless it says otherwise) or epoch seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise GputopError(f"--start {text!r}: give a date and time like 2024-05-01T12:00:00 "
                          "(UTC) or epoch seconds") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()
