"""The diagnostics over the jobs recorded on both real cards, an H100 and an H200
(fixtures/nvidia/h100-train and h200-train, README.md in each says how): the same job is named
the same way on either, within the same time."""

from __future__ import annotations

import pytest

from tests.helpers.real_cards import began, findings, ticks

CARDS = ["h100-train", "h200-train"]


@pytest.mark.parametrize("card", CARDS)
def test_copies_that_fill_the_copy_engines_are_copy_bound_and_not_host_bound(card: str) -> None:
    # Pinned memory both ways: NVML util 100 %, GPM graphics 0.1 %, PCIe 29-30 GB/s in and
    # 31-32 GB/s out, and the main thread at 100 % of a core, spinning in
    # torch.cuda.synchronize().
    snaps = ticks(card, "copy_bound")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("gpu.copy_bound", "info")
    assert "% util but its engines are 0 % busy" in f.title
    assert f.evidence["pcie_rx_bps"] > 25e9 and f.evidence["pcie_tx_bps"] > 25e9
    assert f.opened is not None and f.opened - began(snaps, 80) <= 40


@pytest.mark.parametrize("card", CARDS)
def test_batches_made_in_the_main_process_starve_the_gpu_within_half_a_minute(card: str) -> None:
    # num_workers=0, torch's threads augmenting each sample in the training process at 15-16
    # cores: the GPU 39-44 % busy (GPM), above the host-bound rule's "mostly idle".
    snaps = ticks(card, "host_bound")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("loader.starvation", "warning")
    assert "loads data in its main process (num_workers=0)" in f.title
    assert f.evidence["main_cpu_pct"] > 1000 and f.evidence["workers"] == 0
    assert f.opened is not None and f.opened - began(snaps, 10) <= 35
    assert f.until is not None
