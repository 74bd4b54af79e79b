"""The diagnostics over real recordings of an H100 running real PyTorch jobs
(fixtures/nvidia/h100-train/README.md says how each was made): each names the cause the job had,
not a neighbouring one, as soon as the rule's hold allows, and says nothing on the idle card or
on a healthy run that pauses to evaluate and save checkpoints."""

from __future__ import annotations

from functools import partial

import pytest

from tests.helpers import real_cards
from tests.helpers.real_cards import began, findings

ticks = partial(real_cards.ticks, "h100-train")


@pytest.mark.parametrize("name", ["idle", "healthy_eval"])
def test_an_idle_card_and_a_run_that_pauses_to_save_say_nothing(name: str) -> None:
    # healthy_eval: 100 % busy at the 700 W cap, with an evaluation pass and a 3 GB torch.save
    # every 20 s, the GPU idle for 3-4 s while the main thread pickles.
    assert findings(ticks(name)) == []


def test_pageable_copies_staged_by_the_main_thread_are_host_bound() -> None:
    # The driver stages each pageable copy through the CPU: util 20 %, GPM 2 %, 9 GB/s in.
    snaps = ticks("copy_pageable")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("step.host_bound", "warning")
    assert "`fixture_workloads.py` main thread at 100 % CPU, GPU copying" in f.title
    assert f.opened is not None and f.opened - began(snaps, 10) <= 25
    assert f.until is not None  # closed once the loop ended


def test_a_lowered_power_limit_is_named_within_20_s_of_the_loop() -> None:
    # healthy's MLP with the limit lowered from 700 to 350 W (nvidia-smi -pl): 100 % busy at
    # 350 W, the SM clock 675-945 MHz of 1980, 13.2 steps a second against 20 at 700 W.
    snaps = ticks("power_capped")
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("power.cap", "warning")
    assert "power limit lowered to 350 W (default 700 W)" in f.title
    assert f.evidence["clock_mhz"] < 1000 and f.evidence["clock_max_mhz"] == 1980
    assert f.opened is not None and f.opened - began(snaps, 80) <= 20
