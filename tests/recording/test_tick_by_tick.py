"""The writer builds each tick's record from the last one's (only the fields that changed are put
again) and its summary decodes only what each patch changed. A recording written that way is,
byte for byte, the one written tick by tick from scratch, and the diagnostics get the very
Snapshots a reader rebuilds from it."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gputop.model import (
    ChildProcess,
    DictMemo,
    JobInfo,
    Missing,
    ProbeStats,
    ProcessSample,
    Snapshot,
    XidEvent,
)
from gputop.recording import (
    RecordingWriter,
    SnapshotDecoder,
    apply,
    read_recording,
    round_to_sensor,
    to_record,
)
from gputop.recording.format import ITEMS, diff
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0


def story() -> list[Snapshot]:
    """Ticks of a node whose parts change in every way a part can: numbers move, objects are
    handed again, values go missing and come back, fields reach and leave their record
    defaults, ints become floats, items come and go, a part goes away and comes back."""
    first = node(2, time=T0, links=3)
    worker = ProcessSample(pid=7, device_index=1, gpu_mem=3 * GIB, cmdline=("python", "x.py"),
                           job=JobInfo(slurm_job_id="9"), cpu_percent=10.4,
                           children=(ChildProcess(8, "w", 99.0, 1),),
                           probe=ProbeStats(ts=T0, allocated=GIB, wait_frac=0.3))
    first = replace(first, processes=(*first.processes, worker),
                    host=replace(first.host, cpu_percent=3.14159, cpu_percent_per_core=(1.2, 3.7),
                                 load_avg=(0.5, 0.4, 0.3)))
    ticks = [first]

    def tick(prev: Snapshot, **parts: Any) -> Snapshot:
        ticks.append(replace(prev, time=prev.time + 1, **parts))
        return ticks[-1]

    d0, d1 = first.devices
    l0, l1, *more = first.links
    p0, p1, w = first.processes
    # One change of each kind a tick on GPU 0, so that each is met on its own.
    # The links handed again (a fast tick); the numbers of the GPUs and of the host move.
    s = tick(first, devices=(replace(d0, util_gpu=40.0, power_draw=500.123),
                             replace(d1, pcie_rx=3.33333e9, mem_used=11 * GIB)),
             host=replace(first.host, cpu_percent=7.25, cpu_percent_per_core=(9.6, 0.4)))
    # A reading goes stale; an int for a float; a link's rate and another's error counters; a
    # process's child and probe move.
    s = tick(s, devices=(replace(s.devices[0], temp_gpu=Missing("stale", since=T0 + 1)),
                         replace(s.devices[1], util_gpu=1)),
             links=(replace(l0, rx=1.23456e9), replace(l1, errors={**l1.errors, "replay": 2}),
                    *more),
             processes=(p0, p1, replace(w, children=(ChildProcess(8, "w", 50.4, 1),),
                                        probe=replace(w.probe, allocated=2 * GIB),
                                        job=JobInfo(slurm_job_id="9", pod_name="ann"))))
    # The same reason again in another object, its time an int; -0.0; a process comes.
    s = tick(s, devices=(replace(s.devices[0], temp_gpu=Missing("stale", since=int(T0) + 1)),
                         replace(s.devices[1], power_draw=-0.0)),
             processes=(*s.processes, ProcessSample(pid=9, device_index=0, gpu_mem=GIB)))
    # Xids counted (fields leaving their record defaults); a float for an int; a process goes.
    s = tick(s, devices=(replace(s.devices[0], xid_count=1, xids=(XidEvent(79, T0 + 4),)),
                         replace(s.devices[1], util_gpu=1.0)),
             processes=(p1, replace(w, cpu_percent=0), s.processes[3]))
    # The count back to its default on its own; the topology goes; a process's job goes.
    s = tick(s, devices=(replace(s.devices[0], xid_count=0), s.devices[1]), topology=None,
             processes=(p1, replace(s.processes[1], job=None), s.processes[2]))
    # The reading comes back; the topology too; a link goes.
    s = tick(s, devices=(replace(s.devices[0], temp_gpu=61.0), s.devices[1]),
             topology=first.topology, links=(l0, *more))
    # A lifetime count read, then not (back to its default); a value where there was None.
    s = tick(s, devices=(replace(s.devices[0], ecc_corrected_aggregate=5), s.devices[1]))
    s = tick(s, devices=(replace(s.devices[0], ecc_corrected_aggregate=Missing("pending")),
                         replace(s.devices[1], util_gpu=True)),
             processes=(p1, replace(s.processes[1], gpu_instance=3), s.processes[2]))
    # A GPU falls off the bus: every reading missing at once.
    gone = Missing("gpu_lost", since=s.time + 1)
    lost = replace(s.devices[1], lost=gone, util_gpu=gone, mem_used=gone, power_draw=gone)
    s = tick(s, devices=(s.devices[0], lost), warnings=("GPU1 fell off the bus",))
    # Nothing new at all, then everything new with the same values.
    s = tick(s)
    tick(s, devices=tuple(replace(d) for d in s.devices),
         processes=tuple(replace(p) for p in s.processes), host=replace(s.host))
    return ticks


def from_scratch(snaps: list[Snapshot], keyframe_every: int) -> list[bytes]:
    """The tick lines written as the writer did before it kept anything from tick to tick."""
    lines, prev = [], None
    for n, snap in enumerate(snaps):
        rec = to_record(snap)
        round_to_sensor(rec)
        line = {"k": rec} if n % keyframe_every == 0 else {"d": diff(prev or {}, rec)}
        lines.append(json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode())
        prev = rec
    return lines


@pytest.mark.parametrize("keyframe_every", [300, 2])
def test_ticks_built_from_the_last_are_written_as_ticks_built_from_scratch(
        tmp_path: Path, keyframe_every: int) -> None:
    snaps = story()
    path = tmp_path / "r.gputop"
    with RecordingWriter(path, keyframe_every=keyframe_every) as w:
        for snap in snaps:
            w.write(snap)
    written = gzip.decompress(path.read_bytes()).splitlines()[1:]  # after the header
    assert written == from_scratch(snaps, keyframe_every)


def test_a_memo_shapes_each_tick_as_to_dict_does_key_for_key() -> None:
    memo = DictMemo(like=ITEMS)
    keys: dict[Any, Any] = {}
    last: tuple[Snapshot, dict[str, Any]] | None = None
    handed_again = 0
    for snap in story():
        got = to_record(snap, memo, keys)
        memo.next_tick()
        # The same keys in the same order and values of the same types: the same JSON.
        assert json.dumps(got) == json.dumps(to_record(snap))
        if last is not None and len(snap.links) == len(last[0].links) and all(
                a is b for a, b in zip(snap.links, last[0].links)):
            assert got["links"] is last[1]["links"]  # what the patch skips by identity
            handed_again += 1
        last = snap, got
    assert handed_again >= 5


def test_the_diagnostics_get_the_snapshots_a_reader_rebuilds(tmp_path: Path) -> None:
    keeper = SummaryKeeper()
    seen: list[Snapshot] = []
    update = keeper.engine.update
    keeper.engine.update = lambda snap: (seen.append(snap), update(snap))[1]  # type: ignore
    path = tmp_path / "r.gputop"
    with RecordingWriter(path, summarizer=keeper, keyframe_every=5) as w:
        for snap in story():
            w.write(snap)
    back = read_recording(path).snapshots
    assert len(seen) == len(back) == len(story())
    for got, want in zip(seen, back):
        assert got == want
        assert repr(got) == repr(want)  # 1 and 1.0 are ==, not the same Snapshot


def test_a_decoder_given_each_patch_decodes_what_a_fresh_one_does() -> None:
    states, patches, state, prev = [], [], None, None
    for snap in story():
        rec = to_record(snap)
        round_to_sensor(rec)
        patch = None if prev is None else diff(prev, rec)
        state = rec if patch is None else apply(state, patch)
        states.append(state)
        patches.append(patch)
        prev = rec
    decoder = SnapshotDecoder()
    last = None
    for state, patch in zip(states, patches):
        got = decoder.decode(state, patch)
        want = SnapshotDecoder().decode(state)
        assert got == want and repr(got) == repr(want)
        if last is not None and patch is not None and "links" not in patch:
            assert got.links is last.links  # not looked at again
        last = got


def patched(first: dict[str, Any], *patches: dict[str, Any]) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = [(first, None)]
    for patch in patches:
        out.append((apply(out[-1][0], patch), patch))
    return out


def test_a_patch_decoder_takes_what_other_writers_may_write() -> None:
    rec = to_record(node(1, time=T0))
    # A value and a reason for the same field (the reason wins), then a new value.
    rec["devices"]["0"]["unavailable"] = {"util_gpu": {"reason": "unsupported"}}
    ticks = patched(rec, {"devices": {"0": {"util_gpu": 6.0}}},
                    # The topology goes, and comes back with fewer keys: the others are
                    # defaults.
                    {"topology": None}, {"topology": {"matrix": [["X"]]}})
    decoder = SnapshotDecoder()
    for state, patch in ticks:
        got, want = decoder.decode(state, patch), SnapshotDecoder().decode(state)
        assert got == want and repr(got) == repr(want)
    assert got.devices[0].util_gpu == Missing("unsupported")
    assert got.topology is not None and got.topology.cpu_affinity == ()
    assert rec["topology"]["cpu_affinity"]


def test_rounding_takes_only_what_was_built_for_the_tick() -> None:
    """The writer rounds the dicts a tick built; the objects of the last tick handed again (a
    list of links between slow ticks) were rounded then, and are not walked again."""
    first = story()[0]
    memo = DictMemo(like=ITEMS)
    keys: dict[Any, Any] = {}
    last = to_record(first, memo, keys)
    round_to_sensor(last, fresh=memo.built, last=last)
    memo.next_tick()
    assert last["links"] and all(float(f"{lk['rx']:.3g}") == lk["rx"]
                                 for lk in last["links"].values() if "rx" in lk)
    dev = replace(first.devices[0], pcie_rx=123456.789)
    rec = to_record(replace(first, devices=(dev, *first.devices[1:])), memo, keys)
    assert rec["links"] is last["links"]  # the very same links: their dict handed again
    shared = next(iter(rec["links"].values()))
    shared["rx"] = 2.3456789e9  # as if it had not been rounded: it is not looked at again
    round_to_sensor(rec, fresh=memo.built, last=last)
    assert rec["devices"]["0"]["pcie_rx"] == 123000.0
    assert shared["rx"] == 2.3456789e9
    round_to_sensor(rec)  # all of it, without `fresh`
    assert shared["rx"] == 2.35e9
