"""Read `nvidia-smi pmon` logs (any `-s` selection, with or without `-o DT`) into Snapshots.

One row per process per GPU per interval; a GPU with no process prints one row of "-". Columns, by
name: gpu, pid, type (C compute, G graphics, C+G, M an MPS client), sm and mem (% of the interval
the process used the SMs and the memory controller; "-" when NVML has no sample for it, as with
MIG), fb (MB), command (the process name, cut to 15 characters by nvidia-smi), and under MIG gi
and ci. enc, dec, jpg, ofa and ccpm have no ProcessSample field.

pmon prints no device facts, so each moment's devices are placeholders (index only, every field
"not in nvidia-smi output"); imported together with a dmon or `--query-gpu` log, the processes are
attached to that log's devices instead. See nvsmi_monitor for grouping and times.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gputop.importers.nvsmi_monitor import (
    ALL_ABSENT,
    Moment,
    Row,
    integer,
    number,
    read_moments,
    reading,
    snapshot,
)
from gputop.importers.nvsmi_values import ABSENT, PROCESS_KINDS
from gputop.model import DeviceSample, ProcessSample, Snapshot

MIB = 1 << 20
_HOST_FIELDS = ("user", "cmdline", "cpu_percent", "rss", "create_time")
_HOST_ABSENT: dict[str, Any] = dict.fromkeys(_HOST_FIELDS, ABSENT)


def parse_pmon(text: str, *, start: float = 0.0, interval: float = 1.0,
               given: Collection[str] = ()) -> list[Snapshot]:
    """The Snapshots of one pmon log, in file order. `start` and `interval` (pmon's -d) time a
    log without a Time column. Raises ValueError when no line can be read."""
    moments = read_moments(text, kind="pmon", key=_key, rest_in_last=True, start=start,
                           interval=interval, given=given)
    return [_snapshot(m) for m in moments]


def _key(row: Row) -> tuple[int, int]:
    pid = row.cells.get("pid", "-")
    return int(row.cells["gpu"]), int(pid) if pid.isdigit() else -1


def _snapshot(moment: Moment) -> Snapshot:
    gpus = sorted({int(r.cells["gpu"]) for r in moment.rows})
    devices = [DeviceSample(index=g, vendor="nvidia", name="", uuid="", pci_bus_id="",
                            **ALL_ABSENT) for g in gpus]  # type: ignore[arg-type]
    processes = [_process(r) for r in moment.rows if r.cells.get("pid", "-").isdigit()]
    return snapshot(moment, devices, processes)


def _process(row: Row) -> ProcessSample:
    c = row.cells
    return ProcessSample(
        pid=int(c["pid"]),
        device_index=int(c["gpu"]),
        kind=PROCESS_KINDS.get(c.get("type", ""), "compute"),
        gpu_mem=integer(c, "fb", scale=MIB),
        sm_util=number(c, "sm"),
        mem_util=number(c, "mem"),
        gpu_instance=_instance(c, "gi"),
        compute_instance=_instance(c, "ci"),
        name=reading(c, "command"),
        **_HOST_ABSENT,
    )


def _instance(c: dict[str, str], column: str) -> int | None:
    text = c.get(column, "-")
    return int(text) if text.isdigit() else None
