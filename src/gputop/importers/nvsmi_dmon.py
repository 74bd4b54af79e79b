"""Read `nvidia-smi dmon` logs (any `-s` selection, with or without `-o DT`) into Snapshots.

Columns, by name (nvidia-smi's units): pwr W; gtemp (older drivers: temp) and mtemp °C; sm, mem,
enc, dec % (sm is the GPU utilization NVML reports, mem the memory-controller one); mclk, pclk MHz
(pclk is the graphics clock, which the SM clock follows); fb MB (used framebuffer); rxpci, txpci
MB/s; sbecc, dbecc ECC errors and pci PCIe replays, read as counts since the driver loaded; pviol,
tviol: share of the interval clocks were held down by power or heat, read as the clock-event
reasons sw_power_cap and sw_thermal when above 0. jpg, ofa, bar1 and ccpm have no DeviceSample
field. Name, UUID and bus id are not printed by dmon. See nvsmi_monitor for grouping and times.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import cast

from gputop.importers.nvsmi_monitor import (
    ALL_ABSENT,
    Moment,
    Row,
    integer,
    number,
    read_moments,
    snapshot,
)
from gputop.model import DeviceSample, Missing, Snapshot

MIB = 1 << 20
# dmon column -> the clock-event reason it stands for when above 0.
_VIOLATIONS = {"pviol": "sw_power_cap", "tviol": "sw_thermal"}


def parse_dmon(text: str, *, start: float = 0.0, interval: float = 1.0,
               given: Collection[str] = ()) -> list[Snapshot]:
    """The Snapshots of one dmon log, in file order. `start` and `interval` (dmon's -d) time a
    log without a Time column. Raises ValueError when no line can be read."""
    moments = read_moments(text, kind="dmon", key=_gpu, rest_in_last=False, start=start,
                           interval=interval, given=given)
    return [snapshot(m, _devices(m)) for m in moments]


def _gpu(row: Row) -> int:
    return int(row.cells["gpu"])


def _devices(moment: Moment) -> list[DeviceSample]:
    return [_device(row.cells) for row in moment.rows]


def _device(c: dict[str, str]) -> DeviceSample:
    f: dict[str, object] = dict(ALL_ABSENT)
    f.update(
        power_draw=number(c, "pwr"),
        temp_gpu=number(c, "gtemp", "temp"),
        temp_mem=number(c, "mtemp"),
        util_gpu=number(c, "sm"),
        util_mem=number(c, "mem"),
        enc_util=number(c, "enc"),
        dec_util=number(c, "dec"),
        clock_mem=integer(c, "mclk"),
        clock_sm=integer(c, "pclk"),
        mem_used=integer(c, "fb", scale=MIB),
        pcie_rx=number(c, "rxpci", scale=MIB),
        pcie_tx=number(c, "txpci", scale=MIB),
        ecc_corrected=integer(c, "sbecc"),
        ecc_uncorrected=integer(c, "dbecc"),
        pcie_replays=integer(c, "pci"),
        throttle=_throttle(c),
    )
    return DeviceSample(index=int(c["gpu"]), vendor="nvidia", name="", uuid="", pci_bus_id="",
                        **f)  # type: ignore[arg-type]


def _throttle(c: dict[str, str]) -> tuple[str, ...] | Missing:
    shares = {reason: number(c, column) for column, reason in _VIOLATIONS.items()}
    known = {reason: v for reason, v in shares.items() if not isinstance(v, Missing)}
    if not known:
        return cast(Missing, shares["sw_power_cap"] if "pviol" in c else shares["sw_thermal"])
    return tuple(reason for reason, v in known.items() if v > 0)
