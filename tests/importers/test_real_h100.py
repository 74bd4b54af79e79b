"""nvidia-smi's views of a real H100 against what gputop's NVML source recorded from the same card
(fixtures/nvidia/h100-train/README.md): the importers read each as NVML gave it."""

from __future__ import annotations

from functools import partial

import pytest

from gputop.importers.formats import import_logs
from gputop.importers.nvsmi_topo import parse_topo_matrix
from tests.helpers import real_cards

HERE = real_cards.FIXTURES / "h100-train"
imported = partial(real_cards.imported, "h100-train")
recorded = partial(real_cards.recorded, "h100-train")
MiB = 1 << 20


@pytest.mark.parametrize("name", ["nvidia-smi-q.xml", "nvidia-smi-q.txt"])
def test_the_card_as_nvidia_smi_q_describes_it_is_the_card_nvml_gave(name: str) -> None:
    gpu, nvml = imported(name), recorded("idle")
    for field in ("name", "uuid", "pci_bus_id", "mem_total", "power_limit",
                  "power_default_limit", "clock_sm_max", "clock_mem_max", "pcie_gen_max",
                  "pcie_width_max", "ecc_enabled", "persistence_mode"):
        assert getattr(gpu, field) == getattr(nvml, field), field
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.mem_total == 81559 * MiB
    assert (gpu.clock_sm_max, gpu.clock_mem_max) == (1980, 2619)
    assert gpu.util_gpu == nvml.util_gpu == 0
    assert gpu.mem_used == nvml.mem_used == 0
    assert abs(gpu.power_draw - nvml.power_draw) < 3


@pytest.mark.parametrize("name", ["copy_bound", "healthy_eval"])
def test_the_card_mid_run_reads_as_the_recorder_read_it_that_second(name: str) -> None:
    text = (HERE / f"{name}.nvidia-smi-q.xml").read_text(encoding="utf-8")
    (snap,) = import_logs([(f"{name}.nvidia-smi-q.xml", text)]).snapshots
    gpu, nvml = snap.devices[0], recorded(name, at=snap.time)
    assert gpu.util_gpu >= 99 and nvml.util_gpu >= 99  # a moment apart: 99 and 100 %
    assert abs(gpu.mem_used - nvml.mem_used) <= 2 * MiB  # MiB in the file
    assert abs(gpu.temp_gpu - nvml.temp_gpu) <= 2


def test_the_default_table_gives_what_it_shows() -> None:
    gpu, nvml = imported("nvidia-smi.txt"), recorded("idle")
    assert (gpu.name, gpu.mem_total, gpu.power_limit) == (nvml.name, nvml.mem_total, 700.0)


def test_the_topology_of_one_card() -> None:
    topo = parse_topo_matrix((HERE / "nvidia-smi-topo.txt").read_text(encoding="utf-8"))
    assert topo.matrix == (("X",),)
    assert topo.cpu_affinity == ("0-15",) and topo.numa_affinity == ("0",)
