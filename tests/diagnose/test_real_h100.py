"""The diagnostics over real recordings of an H100 running real PyTorch jobs
(fixtures/nvidia/h100-train/README.md says how each was made): each names the cause the job had,
not a neighbouring one, as soon as the rule's hold allows, and says nothing on the idle card or
on a healthy run that pauses to evaluate and save checkpoints."""

from __future__ import annotations

from functools import partial

import pytest

from gputop.model import Snapshot
from tests.helpers import real_cards
from tests.helpers.real_cards import findings

ticks = partial(real_cards.ticks, "h100-train")


def began(snaps: list[Snapshot], util: float) -> float:
    """The first tick whose NVML utilization reached `util`: the job's loop had begun."""
    return next(s.time for s in snaps if (s.devices[0].util_gpu or 0) >= util)


@pytest.mark.parametrize("name", ["idle", "healthy_eval"])
def test_an_idle_card_and_a_run_that_pauses_to_save_say_nothing(name: str) -> None:
    # healthy_eval: 100 % busy at the 700 W cap, with an evaluation pass and a 3 GB torch.save
    # every 20 s, the GPU idle for 3-4 s while the main thread pickles.
    assert findings(ticks(name)) == []


def test_copies_that_fill_the_copy_engines_are_copy_bound_and_not_host_bound() -> None:
    # Pinned memory both ways: NVML util 100 %, GPM graphics 0.1 %, PCIe 29 GB/s in and 31 GB/s
    # out, and the main thread at 100 % of a core, spinning in torch.cuda.synchronize().
    snaps = ticks("copy_bound")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("gpu.copy_bound", "info")
    assert "100 % util but its engines are 0 % busy" in f.title
    assert f.evidence["pcie_rx_bps"] > 25e9 and f.evidence["pcie_tx_bps"] > 25e9
    assert f.opened is not None and f.opened - began(snaps, 80) <= 40


def test_pageable_copies_staged_by_the_main_thread_are_host_bound() -> None:
    # The driver stages each pageable copy through the CPU: util 20 %, GPM 2 %, 9 GB/s in.
    snaps = ticks("copy_pageable")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("step.host_bound", "warning")
    assert "`fixture_workloads.py` main thread at 100 % CPU, GPU copying" in f.title
    assert f.opened is not None and f.opened - began(snaps, 10) <= 25
    assert f.until is not None  # closed once the loop ended


def test_batches_made_in_the_main_process_starve_the_gpu_within_half_a_minute() -> None:
    # num_workers=0, torch's threads augmenting each sample in the training process at 15-16
    # cores: the GPU 44 % busy (GPM), above the host-bound rule's "mostly idle".
    snaps = ticks("host_bound")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("loader.starvation", "warning")
    assert "loads data in its main process (num_workers=0)" in f.title
    assert f.evidence["main_cpu_pct"] > 1000 and f.evidence["workers"] == 0
    assert f.opened is not None and f.opened - began(snaps, 10) <= 35
    assert f.until is not None


def test_a_lowered_power_limit_is_named_within_20_s_of_the_loop() -> None:
    # healthy's MLP with the limit lowered from 700 to 350 W (nvidia-smi -pl): 100 % busy at
    # 350 W, the SM clock 675-945 MHz of 1980, 13.2 steps a second against 20 at 700 W.
    snaps = ticks("power_capped")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("power.cap", "warning")
    assert "power limit lowered to 350 W (default 700 W)" in f.title
    assert f.evidence["clock_mhz"] < 1000 and f.evidence["clock_max_mhz"] == 1980
    assert f.opened is not None and f.opened - began(snaps, 80) <= 20
