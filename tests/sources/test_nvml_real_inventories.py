"""Real GPUs, as nvidia-smi saw them, served through the fake NVML library to the real NVML
source: what the source reports must match what the card reported (tests/data/realdata)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.importers.nvsmi_xml import parse_nvsmi_xml
from gputop.model import Missing
from gputop.sources.nvml import NvmlSource
from gputop.testing.fake_nvml import FakeNvml

DATA = Path(__file__).resolve().parents[1] / "data" / "realdata"
SAMPLES = sorted((DATA / "nvidia-smi-xml").glob("*.xml"))
FIELDS = ("name", "pci_bus_id", "mem_total", "mem_used", "temp_gpu", "power_draw", "power_limit",
          "clock_sm", "clock_mem", "clock_sm_max", "throttle", "pstate", "fan", "pcie_gen_max",
          "pcie_width_max", "mig_enabled", "ecc_enabled")


def poll(snap):
    with FakeNvml([snap, snap]) as fake:
        src = NvmlSource(slow_interval=0)
        src.open()
        src.poll(snap.time)
        fake.advance()
        tick = src.poll(snap.time + 1)
        src.close()
    return tick


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_the_source_reports_what_the_card_reported(path: Path) -> None:
    want = parse_nvsmi_xml(path.read_text())
    tick = poll(want)
    assert len(tick.devices) == len(want.devices)
    for got, exp in zip(tick.devices, want.devices, strict=True):
        for name in FIELDS:
            g, e = getattr(got, name), getattr(exp, name)
            if isinstance(e, Missing):
                assert isinstance(g, Missing), (name, g)
            else:
                assert g == e, name
    got_procs = sorted((p.device_index, p.pid, p.kind) for p in tick.processes)
    want_procs = sorted((p.device_index, p.pid, p.kind) for p in want.processes)
    assert got_procs == want_procs


def test_a100_mig_devices_are_listed() -> None:
    path = next(p for p in SAMPLES if "mig" in p.name)
    want = parse_nvsmi_xml(path.read_text())
    tick = poll(want)
    d = tick.devices[0]
    assert d.mig_enabled is True
    assert [(m.gpu_instance, m.mem_total) for m in d.mig_devices] == \
        [(m.gpu_instance, m.mem_total) for m in want.devices[0].mig_devices]
    assert d.util_gpu.reason == "unsupported"
