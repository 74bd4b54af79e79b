"""The recorder's summary diagnoses each tick as a reader gets it back, without reading back what
it wrote: made from the Snapshot written and its rounded record, it is the very Snapshot a reader
decodes (the values, their kinds, the order of the processes), over real recordings with
full-precision readings and processes coming and going, and the summary made of those ticks is
the one made by decoding every tick."""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gputop.feeds.playback import demo_path
from gputop.model import DeviceSample, HostSample, LinkSample, ProcessSample, Snapshot
from gputop.recording import ReadBack, RecordingWriter, read_recording, round_to_sensor, to_record
from gputop.recording.format import ROUNDED
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import GIB, node
from tests.helpers.real_cards import FIXTURES


def recordings() -> dict[str, list[Snapshot]]:
    files = {"demo": demo_path(), "h100 host-bound": FIXTURES / "h100-train/host_bound.jsonl.gz",
             "h200 starved": FIXTURES / "h200-train/starved.jsonl.gz",
             "h200 near OOM": FIXTURES / "h200-train/near_oom.jsonl.gz"}
    return {name: read_recording(path).snapshots[:150] for name, path in files.items()}


@pytest.fixture(scope="module")
def real() -> dict[str, list[Snapshot]]:
    return recordings()


def _rough(v: Any, r: random.Random) -> Any:
    return v * (1 + r.random() / 997) + r.random() / 7 if type(v) is float else v


def as_polled(snaps: list[Snapshot]) -> list[Snapshot]:
    """The ticks with the digits a live source gives (which the writer rounds away), and with
    processes that come and go, and are listed in another order from time to time."""
    r = random.Random(7)
    out = []
    for n, s in enumerate(snaps):
        procs = [replace(p, cpu_percent=_rough(p.cpu_percent, r),
                         children=tuple(replace(c, cpu_percent=_rough(c.cpu_percent, r))
                                        for c in p.children)) for p in s.processes]
        if n % 7 == 3 and procs:
            del procs[n % len(procs)]  # one goes for a tick, and comes back last or in its place
        if n % 11 == 5:
            procs.reverse()
        if 40 <= n % 60 < 45:  # one starts, listed first
            procs.insert(0, ProcessSample(pid=99_000 + n // 60, device_index=0, gpu_mem=GIB,
                                          cpu_percent=_rough(12.0, r)))
        out.append(replace(
            s, processes=tuple(procs),
            host=replace(s.host, cpu_percent=_rough(s.host.cpu_percent, r),
                         cpu_percent_per_core=tuple(_rough(c, r)
                                                    for c in s.host.cpu_percent_per_core)),
            devices=tuple(replace(d, pcie_rx=_rough(d.pcie_rx, r), pcie_tx=_rough(d.pcie_tx, r))
                          for d in s.devices),
            links=tuple(replace(lk, rx=_rough(lk.rx, r)) if n % 5 == 0 else lk
                        for lk in s.links)))
    return out


class Written:
    """Each tick as a writer hands it to its summarizer: (record, patch, Snapshot)."""

    def __init__(self) -> None:
        self.ticks: list[tuple[dict[str, Any], Any, Snapshot | None]] = []

    def add(self, rec: dict[str, Any], patch: Any, snap: Snapshot | None = None) -> None:
        self.ticks.append((rec, patch, snap))

    def summary(self, series: str | None, segment: int | None) -> dict[str, Any]:
        return {}

    def next_file(self) -> None:
        pass


@pytest.mark.parametrize("name", ["demo", "h100 host-bound", "h200 starved", "h200 near OOM"])
def test_a_tick_read_back_is_the_snapshot_a_reader_decodes(
        tmp_path: Path, real: dict[str, list[Snapshot]], name: str) -> None:
    snaps = as_polled(real[name])
    path = tmp_path / "r.gputop"
    written = Written()
    with RecordingWriter(path, keyframe_every=50, summarizer=written) as w:
        for s in snaps:
            w.write(s)
    back = read_recording(path).snapshots
    read = ReadBack()
    got = [read.read(rec, patch, snap) for rec, patch, snap in written.ticks]
    assert len(got) == len(back) == len(snaps)
    assert all(snap is not None for _, _, snap in written.ticks)  # none read as a reader
    for a, b, s in zip(got, back, snaps):
        assert repr(a) == repr(b)  # the same values of the same kinds, in the same order
        assert a.host != s.host or not s.host.cpu_percent_per_core  # rounded, as written
    # Processes came and went: a reader has the new ones last, wherever the source put them.
    assert any([p.pid for p in b.processes] != [p.pid for p in s.processes]
               for b, s in zip(back, snaps))


@pytest.mark.parametrize("name", ["demo", "h200 starved"])
def test_the_summary_of_ticks_read_back_is_that_of_ticks_decoded(
        tmp_path: Path, real: dict[str, list[Snapshot]], name: str) -> None:
    snaps = as_polled(real[name])
    written = Written()
    with RecordingWriter(tmp_path / "r.gputop", keyframe_every=40, summarizer=written) as w:
        for s in snaps:
            w.write(s)
    summaries, half = [], len(snaps) // 2
    for snapshots in (True, False):
        keeper = SummaryKeeper(batch=7)
        for n, (rec, patch, snap) in enumerate(written.ticks):
            if n == half:  # a file ends

                keeper.summary(None, None)
                keeper.next_file()
            keeper.add(rec, patch, snap if snapshots else None)
        summaries.append(keeper.summary(None, None))
    assert summaries[0]["findings"] or name == "demo"
    assert summaries[0]["recap"]["ticks"] == len(snaps) - half
    assert summaries[0] == summaries[1]


def test_a_process_that_starts_is_read_back_last_wherever_its_source_lists_it(
        tmp_path: Path) -> None:
    first = node(2)
    new = ProcessSample(pid=5, device_index=0, gpu_mem=GIB)
    second = replace(first, time=first.time + 1, processes=(new, *first.processes))
    written = Written()
    with RecordingWriter(tmp_path / "r.gputop", summarizer=written) as w:
        w.write(first)
        w.write(second)
    read = ReadBack()
    got = [read.read(rec, patch, snap) for rec, patch, snap in written.ticks]
    assert [p.pid for p in got[1].processes] == [1000, 1001, 5]
    assert got == read_recording(tmp_path / "r.gputop").snapshots


def test_rounding_changes_only_the_fields_read_back_from_the_record(
        real: dict[str, list[Snapshot]]) -> None:
    parts = {"host": HostSample, "devices": DeviceSample, "processes": ProcessSample,
             "links": LinkSample}
    changed = set()
    for snap in as_polled(real["demo"])[:20]:
        rec = to_record(snap)
        rounded = copy.deepcopy(rec)
        round_to_sensor(rounded)
        for name, cls in parts.items():
            pairs = ([(rec[name], rounded[name])] if name == "host"
                     else [(rec[name][k], rounded[name][k]) for k in rec[name]])
            for a, b in pairs:
                moved = {k for k in a if repr(a[k]) != repr(b[k])}
                assert moved <= set(ROUNDED[cls]), (name, moved)
                changed |= moved
    assert {"cpu_percent_per_core", "cpu_percent", "pcie_rx", "rx", "children"} <= changed
