"""nvidia-smi's views of a real H200 and a real H100 against what gputop's NVML source recorded
from the same card (fixtures/nvidia/*-train/README.md): the importers read each as NVML gave
it."""

from __future__ import annotations

import pytest

from gputop.importers.formats import import_logs
from gputop.importers.nvsmi_topo import parse_topo_matrix
from gputop.model import Missing
from tests.helpers.real_cards import FIXTURES, imported, recorded

MiB = 1 << 20
CARDS = {"h200-train": ("NVIDIA H200", 143771), "h100-train": ("NVIDIA H100 80GB HBM3", 81559)}


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("name", ["nvidia-smi-q.xml", "nvidia-smi-q.txt"])
def test_the_card_as_nvidia_smi_q_describes_it_is_the_card_nvml_gave(card: str, name: str) -> None:
    gpu, nvml = imported(card, name), recorded(card, "idle")
    for field in ("name", "uuid", "pci_bus_id", "mem_total", "power_limit",
                  "power_default_limit", "clock_sm_max", "clock_mem_max", "pcie_gen_max",
                  "pcie_width_max", "ecc_enabled", "persistence_mode"):
        assert getattr(gpu, field) == getattr(nvml, field), field
    assert (gpu.name, gpu.mem_total) == (CARDS[card][0], CARDS[card][1] * MiB)
    # Idle, moments apart: the same readings.
    assert gpu.util_gpu == nvml.util_gpu == 0
    assert gpu.mem_used == nvml.mem_used == 0
    assert abs(gpu.power_draw - nvml.power_draw) < 3
    # nvidia-smi gives the slowdown temperature only relative to T.Limit; NVML gives 89 °C.
    assert isinstance(gpu.temp_slowdown, Missing) and nvml.temp_slowdown == 89


# The utilization nvidia-smi and NVML read a moment apart: the same, but for the copies.
@pytest.mark.parametrize(("card", "name", "util"), [("h200-train", "healthy", (99, 99)),
                                                    ("h100-train", "healthy_eval", (100, 100)),
                                                    ("h100-train", "copy_bound", (99, 100)),
                                                    ("h200-train", "copy_bound", (100, 100))])
def test_the_card_mid_run_reads_as_the_recorder_read_it_that_second(
        card: str, name: str, util: tuple[int, int]) -> None:
    text = (FIXTURES / card / f"{name}.nvidia-smi-q.xml").read_text(encoding="utf-8")
    (snap,) = import_logs([(f"{name}.nvidia-smi-q.xml", text)]).snapshots
    gpu, nvml = snap.devices[0], recorded(card, name, at=snap.time)
    assert (gpu.util_gpu, nvml.util_gpu) == util
    assert abs(gpu.mem_used - nvml.mem_used) <= 2 * MiB  # MiB in the file
    assert abs(gpu.temp_gpu - nvml.temp_gpu) <= 2
    if name != "copy_bound":  # computing at the 700 W cap
        assert abs(gpu.power_draw - nvml.power_draw) < 30
        # The SM clock moves from second to second at the cap (1560 and 1740 MHz on the H200).
        assert 1000 < gpu.clock_sm <= gpu.clock_sm_max
        assert 1000 < nvml.clock_sm <= nvml.clock_sm_max
        assert "sw_power_cap" in gpu.throttle and "sw_power_cap" in nvml.throttle


def test_a_lowered_power_limit_reads_as_the_recorder_read_it() -> None:
    # The H100 with its limit lowered from 700 to 350 W (nvidia-smi -pl), half-way through a run.
    text = (FIXTURES / "h100-train" / "power_capped.nvidia-smi-q.xml").read_text(encoding="utf-8")
    (snap,) = import_logs([("power_capped.nvidia-smi-q.xml", text)]).snapshots
    gpu, nvml = snap.devices[0], recorded("h100-train", "power_capped", at=snap.time)
    assert (gpu.power_limit, gpu.power_default_limit) == (350.0, 700.0)
    assert (nvml.power_limit, nvml.power_default_limit) == (350.0, 700.0)
    assert abs(gpu.power_draw - nvml.power_draw) < 10 and gpu.power_draw < 360
    assert 600 < gpu.clock_sm < 1000 and 600 < nvml.clock_sm < 1000
    assert gpu.throttle == nvml.throttle == ("sw_power_cap",)


@pytest.mark.parametrize("card", CARDS)
def test_the_default_table_gives_what_it_shows(card: str) -> None:
    gpu, nvml = imported(card, "nvidia-smi.txt"), recorded(card, "idle")
    assert (gpu.name, gpu.mem_total, gpu.power_limit) == (nvml.name, nvml.mem_total, 700.0)


@pytest.mark.parametrize("card", CARDS)
def test_the_topology_of_one_card_underlined_header_and_all(card: str) -> None:
    topo = parse_topo_matrix((FIXTURES / card / "nvidia-smi-topo.txt").read_text(encoding="utf-8"))
    assert topo.matrix == (("X",),)
    assert topo.cpu_affinity == ("0-15",) and topo.numa_affinity == ("0",)
