"""The diagnostics over real recordings of an H200 running real PyTorch jobs
(fixtures/nvidia/h200-train/README.md says how each was made): each names what the job did, as
soon as the rule's hold allows, and says nothing on the healthy and idle runs."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest

from gputop.model import Snapshot
from tests.helpers import real_cards
from tests.helpers.real_cards import findings

ticks = partial(real_cards.ticks, "h200-train")


def first_step(snaps: list[Snapshot]) -> float:
    """When the probe first counted a step: the job's loop had begun."""
    return next(s.time for s in snaps if any(p.probe and p.probe.steps for p in s.processes))


def without_probe(snaps: list[Snapshot]) -> list[Snapshot]:
    return [dataclasses.replace(s, processes=tuple(dataclasses.replace(p, probe=None)
                                                   for p in s.processes)) for s in snaps]


@pytest.mark.parametrize("name", ["idle", "healthy"])
def test_an_idle_card_and_a_busy_healthy_step_say_nothing(name: str) -> None:
    snaps = ticks(name)
    assert findings(snaps) == []
    assert findings(without_probe(snaps)) == []


def test_a_starved_loader_is_named_within_seconds_of_its_first_step() -> None:
    snaps = ticks("starved")
    found = [f for f in findings(snaps) if f.id == "loader.starvation"]
    assert len(found) == 1, found
    f = found[0]
    assert f.severity == "critical"
    assert f.opened is not None and f.opened - first_step(snaps) <= 6
    # The job's script, not the probe's runner, and the cause the host shows.
    assert "`fixture_workloads.py`" in f.title and "gputop.probe" not in f.title
    assert "2 workers at 100 % CPU" in f.title
    assert f.until is not None  # the job ended before the recording did


def test_a_starved_loader_is_named_without_the_probe_from_gpm_and_its_workers() -> None:
    # NVML util reads 0 for 20 s and more of this run (a few ms of kernels a step); GPM's
    # graphics activity shows the steps between the waits.
    snaps = without_probe(ticks("starved"))
    begun = first_step(ticks("starved"))
    found = [f for f in findings(snaps) if f.id == "loader.starvation"]
    assert len(found) == 1, found
    f = found[0]
    assert f.severity == "warning"
    assert "2 DataLoader workers" in f.title and "100 % CPU" in f.title
    assert f.opened is not None and f.opened - begun <= 25


def test_a_fragmented_allocator_running_out_of_memory_is_critical_at_once() -> None:
    snaps = ticks("fragmented")
    found = [f for f in findings(snaps) if f.id == "mem.fragmentation"]
    assert len(found) == 1, found
    f = found[0]
    assert f.severity == "critical"
    assert f.opened is not None and f.opened - f.since <= 1
    assert f.evidence["ooms"] >= 1 and f.evidence["pressure"] > 0.95
    assert f.until is None  # the allocator keeps its pool until the process ends


def test_a_batch_ramped_to_the_limit_of_its_cached_pool_raises_no_alarm() -> None:
    # Reserved 102 GiB (73 % of the card) for 37 GiB allocated: the allocator's pool kept the
    # smaller batches' blocks. The fragmentation rule holds that for 5 min below 85 % of the card,
    # and the headroom estimate, counting the pool, finds less than 1.25x to suggest.
    snaps = ticks("near_oom")
    assert [f for f in findings(snaps) if f.severity != "info"] == []


def test_memory_filled_with_the_gpu_idle_reads_as_a_load_until_it_would_overfill() -> None:
    # 2.5 GiB/s for 30 s with the GPU at 3 %: a load (weights) looks the same, and stops short of
    # full; it is named only once the card would be full within 30 s at that rate.
    snaps = ticks("leak")
    assert findings(snaps) == []


def test_a_leak_in_a_busy_loop_is_named_with_its_time_to_out_of_memory() -> None:
    # 1 GiB/s kept from a loop running the GPU at 98 %, on a 141 GiB card: named once the card
    # would be full within 2 min at that rate, about 20 s into the growth.
    snaps = ticks("leak_busy")
    sizes = [(s.time, p.gpu_mem) for s in snaps for p in s.processes]
    grew = next(t for t, m in sizes if m >= sizes[0][1] + 2 * (1 << 30))
    (f,) = findings(snaps)
    assert (f.id, f.severity) == ("mem.oom_soon", "warning")
    assert "`fixture_workloads.py` memory grows 1.00 GiB/s" in f.title
    assert f.opened is not None and 15 <= f.opened - grew <= 25
    assert f.until is not None  # it closes once the loop ends and the growth stops
