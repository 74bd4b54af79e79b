"""R8 health: a lost GPU, ECC and row remapping, PCIe and NVLink links."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gputop.diagnose import Engine
from gputop.diagnose.rules import BUILTIN, health
from gputop.model import Missing, Snapshot, mark_all
from gputop.testing.synthetic import node

T0 = 1_800_000_000.0


def with_gpu(s: Snapshot, index: int, **over: Any) -> Snapshot:
    return replace(s, devices=tuple(replace(d, **over) if d.index == index else d
                                    for d in s.devices))


def steady(seconds: int, n: int = 8, **over: Any) -> list[Snapshot]:
    return [node(n, time=T0 + t, links=18, **over) for t in range(seconds)]


def test_a_lost_gpu_is_critical_at_once() -> None:
    engine = Engine(BUILTIN)
    for s in steady(60):
        assert engine.update(s) == []
    gone = Missing("gpu_lost", since=T0 + 60)
    s = node(8, time=T0 + 60, links=18)
    lost = mark_all(s.devices[3], gone)
    s = replace(s, devices=tuple(replace(lost, lost=gone) if d.index == 3 else d
                                 for d in s.devices))
    found = engine.update(s)
    assert [(f.id, f.device, f.severity) for f in found] == [("gpu.lost", 3, "critical")]
    assert found[0].since == T0 + 60 and "fell off the bus" in found[0].title
    assert "reboot" in found[0].fix.lower()


def test_a_pending_row_remap_asks_for_a_reset() -> None:
    snaps = steady(10)
    snaps[-1] = with_gpu(snaps[-1], 4, remap_pending=True)
    (c,) = health.check_memory_errors(snaps)
    assert (c.id, c.device, c.severity) == ("ecc.remap_pending", 4, "warning")
    assert "reset" in c.title and "nvidia-smi -r" in c.fix


def test_a_failed_row_remap_is_critical_and_an_rma_candidate() -> None:
    snaps = steady(10)
    snaps[-1] = with_gpu(snaps[-1], 2, remap_pending=True, remap_failed=True)
    (c,) = health.check_memory_errors(snaps)
    assert (c.id, c.severity) == ("ecc.remap_failed", "critical") and "RMA" in c.fix


def test_new_uncorrectable_ecc_errors_are_critical() -> None:
    snaps = [with_gpu(s, 1, ecc_uncorrected=0 if t < 50 else 2) for t, s in enumerate(steady(60))]
    (c,) = health.check_memory_errors(snaps)
    assert (c.id, c.device, c.severity) == ("ecc.uncorrected", 1, "critical")
    assert c.evidence["new_uncorrected"] == 2
    assert c.title == "GPU1: 2 new uncorrectable ECC error(s) since the driver loaded"
    # Errors since the driver loaded that do not grow: one tick says the GPU needs a reset.
    found = health.check_memory_errors(steady(1, n=2, ecc_uncorrected=5))
    assert [(c.id, c.device, c.severity) for c in found] == [
        ("ecc.uncorrected", 0, "critical"), ("ecc.uncorrected", 1, "critical")]
    assert found[0].title == "GPU0: 5 uncorrectable ECC error(s) since the driver loaded"
    assert health.check_memory_errors(steady(60, ecc_uncorrected=0)) == []


def test_one_tick_names_lifetime_ecc_errors_and_a_pending_page_retirement() -> None:
    snap = with_gpu(steady(1, n=2)[0], 1, ecc_uncorrected=0, ecc_uncorrected_aggregate=3,
                    retire_pending=True, ecc_sram_threshold_exceeded=True)
    found = {c.id: c for c in health.check_memory_errors([snap])}
    assert set(found) == {"ecc.lifetime", "ecc.retire_pending", "ecc.sram_threshold"}
    assert found["ecc.sram_threshold"].severity == "critical"
    assert found["ecc.lifetime"].severity == "warning"
    assert found["ecc.lifetime"].title == "GPU1: 3 uncorrectable ECC error(s) over its lifetime"
    assert found["ecc.retire_pending"].device == 1


def test_a_pcie_link_downtrained_under_load_is_flagged_from_one_tick() -> None:
    snaps = steady(400, n=2, pcie_gen=4, pcie_width=8)
    found = Engine([health.PCIE]).run(snaps)
    assert [(f.id, f.device) for f in found] == [("pcie.downtrained", 0), ("pcie.downtrained", 1)]
    assert "Gen4 x8 under load (max Gen5 x16)" in found[0].title
    assert found[0].opened == snaps[0].time
    # An idle link that downshifts to save power says nothing.
    idle = steady(60, n=1, pcie_gen=1, pcie_width=8, util_gpu=0.0)
    assert Engine([health.PCIE]).run(idle) == []


def test_an_idle_link_that_downshifts_to_save_power_is_not_downtrained() -> None:
    snaps = steady(400, n=2, pcie_gen=1, util_gpu=0.0)
    assert Engine([health.PCIE]).run(snaps) == []


def test_pcie_replays_over_100_a_minute_are_a_warning() -> None:
    snaps = [with_gpu(s, 0, pcie_replays=3 * t) for t, s in enumerate(steady(90, n=2))]
    (c,) = health.check_pcie(snaps)
    assert c.id == "pcie.replays" and c.evidence["replays_per_min"] == 180


def test_rising_nvlink_errors_name_the_link() -> None:
    snaps = []
    for t, s in enumerate(steady(120)):
        links = tuple(replace(lk, errors={"replay": t // 20, "recovery": 0, "crc_flit": 0,
                                          "crc_data": 0})
                      if (lk.device_index, lk.link) == (6, 11) else lk for lk in s.links)
        snaps.append(replace(s, links=links))
    (c,) = health.check_nvlink(snaps)
    assert (c.id, c.device, c.severity) == ("nvlink.errors", 6, "warning")
    assert "link 11 errors rising: 5 new" in c.title


def test_a_link_that_goes_down_is_critical() -> None:
    snaps = steady(20)
    for i in range(15, 20):
        links = tuple(replace(lk, up=False) if (lk.device_index, lk.link) == (2, 4) else lk
                      for lk in snaps[i].links)
        snaps[i] = replace(snaps[i], links=links)
    (c,) = health.check_nvlink(snaps)
    assert (c.id, c.device, c.severity) == ("nvlink.down", 2, "critical") and "link 4" in c.title
    # A link that was never up in the window (not connected) is not "down".
    never = [replace(s, links=tuple(replace(lk, up=False) if lk.link == 17 else lk
                                    for lk in s.links)) for s in steady(20)]
    assert health.check_nvlink(never) == []
