"""nvidia-smi's views of a real H200 against what gputop's NVML source recorded from the same card
(fixtures/nvidia/h200-train/README.md): the importers read each as NVML gave it."""

from __future__ import annotations

from functools import partial

import pytest

from gputop.importers.formats import import_logs
from gputop.importers.nvsmi_topo import parse_topo_matrix
from gputop.model import Missing
from tests.helpers import real_cards

HERE = real_cards.FIXTURES / "h200-train"
imported = partial(real_cards.imported, "h200-train")
recorded = partial(real_cards.recorded, "h200-train")
MiB = 1 << 20


@pytest.mark.parametrize("name", ["nvidia-smi-q.xml", "nvidia-smi-q.txt"])
def test_the_card_as_nvidia_smi_q_describes_it_is_the_card_nvml_gave(name: str) -> None:
    gpu, nvml = imported(name), recorded("idle")
    for field in ("name", "uuid", "pci_bus_id", "mem_total", "power_limit",
                  "power_default_limit", "clock_sm_max", "clock_mem_max", "pcie_gen_max",
                  "pcie_width_max", "ecc_enabled", "persistence_mode"):
        assert getattr(gpu, field) == getattr(nvml, field), field
    assert gpu.name == "NVIDIA H200" and gpu.mem_total == 143771 * MiB
    # Idle, moments apart: the same readings.
    assert gpu.util_gpu == nvml.util_gpu == 0
    assert gpu.mem_used == nvml.mem_used == 0
    assert abs(gpu.power_draw - nvml.power_draw) < 3
    # nvidia-smi gives the slowdown temperature only relative to T.Limit; NVML gives 89 °C.
    assert isinstance(gpu.temp_slowdown, Missing) and nvml.temp_slowdown == 89


def test_the_card_mid_step_reads_as_the_recorder_read_it_that_second() -> None:
    snap_xml = (HERE / "healthy.nvidia-smi-q.xml").read_text(encoding="utf-8")
    (snap,) = import_logs([("healthy.nvidia-smi-q.xml", snap_xml)]).snapshots
    gpu, nvml = snap.devices[0], recorded("healthy", at=snap.time)
    assert gpu.util_gpu == nvml.util_gpu == 99
    assert abs(gpu.mem_used - nvml.mem_used) <= 2 * MiB  # MiB in the file
    assert abs(gpu.power_draw - nvml.power_draw) < 30
    assert abs(gpu.temp_gpu - nvml.temp_gpu) <= 2
    # At its 700 W cap the SM clock moves from second to second (1560 and 1740 MHz here).
    assert 1000 < gpu.clock_sm <= gpu.clock_sm_max and 1000 < nvml.clock_sm <= nvml.clock_sm_max
    assert "sw_power_cap" in gpu.throttle and "sw_power_cap" in nvml.throttle


def test_the_default_table_gives_what_it_shows() -> None:
    gpu, nvml = imported("nvidia-smi.txt"), recorded("idle")
    assert (gpu.name, gpu.mem_total, gpu.power_limit) == (nvml.name, nvml.mem_total, 700.0)


def test_the_topology_of_one_card_underlined_header_and_all() -> None:
    topo = parse_topo_matrix((HERE / "nvidia-smi-topo.txt").read_text(encoding="utf-8"))
    assert topo.matrix == (("X",),)
    assert topo.cpu_affinity == ("0-15",) and topo.numa_affinity == ("0",)
