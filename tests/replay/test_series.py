"""`gputop replay` of a run written in segments (run.gputop, run.gputop.1, ...): the files play as
one run, with one tick numbering and clock, seeks anywhere in it, the Findings carried from one
file into the next, and --follow going on in the file the writer starts next."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputop.diagnose import Engine
from gputop.diagnose.rules.throttle import THERMAL
from gputop.recording import RecordingWriter, SeriesReader
from gputop.recording.series_index import SeriesIndex
from gputop.replay.control import ReplayFeed
from gputop.replay.seek import parse_seek
from gputop.replay.timeline import FindingsTimeline
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import node
from tests.helpers.waiting import until, within

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
HOT = range(20, 118)  # ticks GPU 0 and 1 are in thermal slowdown: across the boundaries
SEG = 2100  # bytes: three files for SNAPS


def tick(t: int) -> Any:
    hot = {"temp_margin": 2.0, "temp_gpu": 85.0, "throttle": ("sw_thermal",)} if t in HOT else {}
    return node(2, time=T0 + t, util_gpu=float(50 + (t * 7) % 50), **hot)


SNAPS = [tick(t) for t in range(120)]


pytestmark = pytest.mark.usefixtures("utc")


def record(path: Path, snaps: list[Any], **kw: Any) -> RecordingWriter:
    with RecordingWriter(path, **kw, summarizer=SummaryKeeper()) as w:
        for s in snaps:
            w.write(s)
    return w


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "run.gputop"
    w = record(path, SNAPS, max_bytes=SEG, meta={"interval": 1.0})
    assert len(w.segments) == 3
    return path




def test_the_three_files_play_as_one_run(run: Path) -> None:
    files = sorted(run.parent.iterdir(), key=lambda p: p.name[::-1])  # as a glob might give
    for given in (run, files):
        with SeriesIndex(given) as index:
            assert index.ticks == 120 and len(index.segments) == 3
            assert index.warning is None and index.finished
            assert list(index.times) == [s.time for s in SNAPS]
            assert 0 < index.starts[1] < index.starts[2] < 120
            reader = index.reader()
            first, second = index.starts[1], index.starts[2]
            for t in (119, 0, second, second - 1, first, first - 1, 60, 1, 119):
                assert reader.snapshot(t) == SNAPS[t], t
            assert reader.devices(first)[1] == SNAPS[first].devices[1]
            reader.close()


def test_a_seek_lands_in_the_middle_file_and_the_header_counts_the_whole_run(
        run: Path) -> None:
    async def play() -> tuple[list[Any], str]:
        with SeriesIndex(run) as index:
            feed = ReplayFeed(index, paused=True, engine=Engine([]))
            middle = (index.starts[1] + index.starts[2]) // 2
            assert parse_seek("08:01:00", index.times, 0) == 60
            assert parse_seek(str(middle + 1), index.times, 0) == middle
            seen: list[Any] = []

            async def consume() -> None:
                async for snap in feed.stream(0.01):
                    seen.append(snap)

            task = asyncio.create_task(consume())
            try:
                await within(until(lambda: len(seen) == 1))
                feed.control.seek(middle)
                feed.wake()
                await within(until(lambda: len(seen) == 2))
                feed.control.to_end()
                feed.wake()
                await within(until(lambda: len(seen) == 3))
                return [seen[1], middle, seen[2]], feed.control.status()
            finally:
                task.cancel()
                feed.close()

    (in_middle, middle, at_end), status = asyncio.run(play())
    assert in_middle == SNAPS[middle] and at_end == SNAPS[-1]
    assert "(tick 120/120)" in status and "08:01:59" in status


def test_findings_of_a_condition_across_the_boundary_are_those_of_one_straight_run(
        run: Path) -> None:
    engine = Engine([THERMAL])
    straight = [engine.update(s) for s in SNAPS]
    with SeriesIndex(run) as index:
        assert HOT.start < index.starts[1] < HOT.stop  # the condition spans the first boundary
        timeline = FindingsTimeline(index, Engine([THERMAL]), every=10, remember=1)
        try:
            for t in (100, index.starts[1] + 5, 30, index.starts[2], 119):
                assert timeline.at(t) == straight[t], t
            assert timeline.restores >= 2
            found = timeline.at(index.starts[2] + 3)  # in the last file
        finally:
            timeline.close()
    # Began in the first file: a replay of one file would have it start at its first tick.
    assert {(f.id, f.device, f.since) for f in found} == {
        ("thermal.sw", 0, SNAPS[20].time), ("thermal.sw", 1, SNAPS[20].time)}


def test_follow_goes_on_in_the_file_the_writer_starts_after_opening(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gputop.recording.series_index.NEXT_SEGMENT_WAIT_S", 0.3)
    path = tmp_path / "live.gputop"
    writer = RecordingWriter(path, max_bytes=SEG, meta={"interval": 1.0},
                             summarizer=SummaryKeeper())
    for s in SNAPS[:10]:
        writer.write(s)

    async def follow() -> tuple[list[float], int, str]:
        with SeriesIndex(path, follow=True) as index:
            feed = ReplayFeed(index, follow=True, engine=Engine([THERMAL]))
            seen: list[float] = []

            async def consume() -> None:
                async for snap in feed.stream(0.05):
                    seen.append(snap.time)

            task = asyncio.create_task(consume())
            try:
                await within(until(lambda: bool(seen)))
                assert seen == [SNAPS[9].time] and len(index.segments) == 1
                for s in SNAPS[10:]:
                    writer.write(s)
                assert len(writer.segments) == 3  # the writer went on in two more files
                await within(until(lambda: seen[-1] == SNAPS[-1].time))
                assert len(index.segments) == 3 and feed.control.follow
                writer.close()
                await within(until(lambda: not feed.control.follow))  # no next file came
                await within(feed.settled())
                return seen, len(feed.timeline.findings()), feed.status()
            finally:
                task.cancel()
                feed.close()

    seen, findings, status = asyncio.run(follow())
    assert seen == sorted(seen) and seen[-1] == SNAPS[-1].time
    assert findings == 2 and status.endswith("(tick 120/120) 1x ■ end")


def test_follow_waits_for_a_next_file_created_but_not_yet_written(tmp_path: Path) -> None:
    path = tmp_path / "live.gputop"
    record(path, SNAPS[:50], max_bytes=SEG)
    with SeriesIndex(path) as index:
        first = index.starts[1]
    nxt = tmp_path / "live.gputop.1"
    whole = nxt.read_bytes()
    nxt.write_bytes(b"")  # the writer has created it and is about to write its header
    with SeriesIndex(path, follow=True) as index:
        assert index.ticks == first and len(index.segments) == 1
        assert not index.finished and index.warning is None
        nxt.write_bytes(whole)
        index.refresh()
        assert index.ticks == 50 and len(index.segments) == 2


def test_a_file_of_another_run_or_a_missing_one_is_said_as_report_says_it(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:4], max_bytes=1)  # a file a tick
    os.unlink(tmp_path / "run.gputop.1")
    record(tmp_path / "other", SNAPS[60:62], max_bytes=1)
    os.replace(tmp_path / "other.1", tmp_path / "run.gputop.3")
    reader = SeriesReader(path)
    expected = [s.time for s in reader]
    with SeriesIndex(path) as index:
        assert list(index.times) == expected == [SNAPS[0].time, SNAPS[2].time]
        assert index.warning == reader.warning
    assert "segment 1 is missing" in (reader.warning or "")
    assert "not the next segment" in (reader.warning or "")


def test_a_file_not_written_in_segments_replays_alone(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:5])
    record(tmp_path / "x", SNAPS[:3], max_bytes=1)
    os.replace(tmp_path / "x.1", tmp_path / "run.gputop.1")
    with SeriesIndex(path) as index:
        assert index.ticks == 5 and len(index.segments) == 1 and index.warning is None


def test_replay_once_prints_the_last_tick_of_the_last_file(run: Path) -> None:
    files = sorted(str(p) for p in run.parent.iterdir())
    for args in ([str(run)], files):
        r = subprocess.run([sys.executable, "-m", "gputop", "replay", *args, "--once", "--json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["time"] == SNAPS[-1].time and r.stderr == ""


def test_follow_of_one_file_grows_though_other_files_are_named_like_it(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    writer = RecordingWriter(path, summarizer=SummaryKeeper())
    for s in SNAPS[:5]:
        writer.write(s)
    record(tmp_path / "x", SNAPS[:3], max_bytes=1)
    os.replace(tmp_path / "x.1", tmp_path / "run.gputop.1")
    with SeriesIndex(path, follow=True) as index:
        assert index.ticks == 5 and index.warning is None and not index.finished
        writer.write(SNAPS[5])
        writer.close()
        assert index.refresh() == 1 and index.finished and len(index.segments) == 1


def test_follow_stops_at_a_next_file_that_is_not_a_recording(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:5], max_bytes=SEG)
    with SeriesIndex(path, follow=True) as index:
        assert not index.finished
        (tmp_path / "run.gputop.1").write_text("not gzip")
        assert index.refresh() == 0 and index.finished and index.ticks == 5
        assert "run.gputop.1 is not a gputop recording" in (index.warning or "")
