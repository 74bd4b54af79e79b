"""Feeds: the demo and replay keep a recording's pace; recording alongside the dashboard survives
a full disk while monitoring goes on."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gputop.errors import RecordingError
from gputop.feeds.diagnosed import DiagnosedFeed
from gputop.feeds.playback import RecordingFeed, demo_path
from gputop.feeds.tee import RecordingTee
from gputop.model.memory_split import memory_splits
from gputop.recording import RecordingWriter, read_recording
from gputop.report.summary import SummaryKeeper
from gputop.sources.base import GpuTick, SourceInfo
from gputop.sources.poller import Poller, ticks
from gputop.testing.synthetic import h100, series


def test_demo_feed_moves_the_recording_to_now_and_loops() -> None:
    snaps = series(3)
    now = [5000.0]
    feed = RecordingFeed(snaps, clock=lambda: now[0])
    times = [feed.poll_once().time for _ in range(4)]
    assert times == [5000.0, 5001.0, 5002.0, 5000.0]


def test_replay_feed_ends() -> None:
    feed = RecordingFeed(series(2), loop=False, retime=False)
    assert [feed.next() is not None for _ in range(3)] == [True, True, False]


def test_a_full_disk_stops_the_recording_but_not_the_monitor(tmp_path: Path) -> None:
    path = tmp_path / "r.gputop"
    writer = RecordingWriter(path, summarizer=SummaryKeeper())
    tee = RecordingTee(RecordingFeed(series(6), loop=False, retime=False), writer)
    got = [tee.poll_once() for _ in range(2)]
    real_write = writer._f.write

    def full(data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writer._f.write = full  # type: ignore[method-assign]
    got += [tee.poll_once() for _ in range(2)]
    assert not got[1].warnings
    assert "recording stopped" in got[2].warnings[-1]
    assert "No space left on device" in got[3].warnings[-1]
    writer._f.write = real_write  # type: ignore[method-assign]
    writer.close()
    assert len(read_recording(path).snapshots) == 2  # what was recorded is kept


def test_stream_is_async() -> None:
    async def take() -> list[float]:
        feed = RecordingFeed(series(3), loop=False, retime=False)
        return [s.time async for s in feed.stream(0)]

    assert len(asyncio.run(take())) == 3
    assert RecordingError  # the error type the tee catches


# ---------------------------------------------------------------------------------------------
# The demo plays on the wall clock: no drift, no clock ahead of it, every time moved with it.


class VirtualTime:
    """A clock that moves only when a feed sleeps or the consumer "works": the stream is driven
    by hand, without an event loop, so the test runs in no real time."""

    def __init__(self, t: float = 1_900_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


def drive(stream: Any, n: int, clock: VirtualTime, work: float) -> list[tuple[float, Any]]:
    """Takes `n` items of an async iterator, spending `work` seconds on each: (when, item)."""
    out = []
    for _ in range(n):
        step = stream.__anext__()
        try:
            step.send(None)
        except StopIteration as done:
            out.append((clock.t, done.value))
        else:  # pragma: no cover - the stream waited on something real
            raise AssertionError("the stream awaited something other than its sleep")
        clock.t += work
    return out


@pytest.fixture
def virtual_time(monkeypatch: pytest.MonkeyPatch) -> VirtualTime:
    clock = VirtualTime()
    monkeypatch.setattr(asyncio, "sleep", clock.sleep)
    monkeypatch.setattr(time, "monotonic", clock)
    return clock


def test_ticks_keep_to_the_clock_and_a_slow_tick_skips_ahead() -> None:
    clock = VirtualTime(100.0)
    gen = ticks(1.0, clock=clock, sleep=clock.sleep)
    deadlines = []
    for work in (0.3, 0.3, 2.5, 0.3, 0.3):
        ((t, deadline),) = drive(gen, 1, clock, work)
        assert t == deadline
        deadlines.append(deadline)
    # Work of 0.3 s a tick costs no drift; a 2.5 s tick skips two deadlines, keeping the beat.
    assert deadlines == [100.0, 101.0, 102.0, 105.0, 106.0]


@pytest.mark.skipif(not demo_path().exists(), reason="the demo recording is not built")
def test_the_demo_does_not_drift_from_the_wall_clock(virtual_time: VirtualTime) -> None:
    feed = RecordingFeed.from_file(demo_path(), clock=virtual_time)
    # Each tick costs the dashboard 0.3 s; after 500 ticks the data is still fresh.
    shown = drive(feed.stream(1.0), 500, virtual_time, work=0.3)
    ages = [t - snap.time for t, snap in shown]
    assert max(ages) < 0.01
    assert shown[-1][0] - shown[0][0] == pytest.approx(499.0)


def test_a_demo_held_up_skips_ticks_instead_of_falling_behind(virtual_time: VirtualTime) -> None:
    feed = RecordingFeed(series(300), clock=virtual_time)
    stream = feed.stream(1.0)
    shown = []
    for n in range(100):
        shown += drive(stream, 1, virtual_time, work=2.5 if n % 10 == 9 else 0.3)
    # Every tenth tick the dashboard is held up 2.5 s: two ticks are skipped, none shown late.
    assert max(t - snap.time for t, snap in shown) < 0.01
    assert len({snap.time for _, snap in shown}) == 100
    assert shown[-1][1].time - shown[0][1].time == pytest.approx(99 + 9 * 2)


@pytest.mark.skipif(not demo_path().exists(), reason="the demo recording is not built")
def test_a_faster_demo_keeps_its_clock_on_the_wall_clock(virtual_time: VirtualTime) -> None:
    feed = RecordingFeed.from_file(demo_path(), clock=virtual_time)
    shown = drive(feed.stream(0.2), 300, virtual_time, work=0.05)
    for t, snap in shown:
        assert abs(snap.time - t) < 0.01  # the header's clock is the snapshot's time
    # The recording goes by five times faster: its processes' ages still grow with the clock.
    first, last = shown[0][1], shown[-1][1]
    pid = first.processes[0].pid
    age = {s.time: s.time - next(p for p in s.processes if p.pid == pid).create_time
           for s in (first, last)}
    assert age[last.time] - age[first.time] == pytest.approx(299 * 1.0, abs=1.5)


@pytest.mark.skipif(not demo_path().exists(), reason="the demo recording is not built")
def test_the_demos_probe_readings_are_moved_to_now_with_its_ticks() -> None:
    now = [5_000_000_000.0]
    feed = RecordingFeed.from_file(demo_path(), clock=lambda: now[0])
    feed.skip(300)
    snap = feed.poll_once()
    probed = [p for p in snap.processes if p.probe is not None]
    assert len(probed) == 8
    for p in probed:
        assert p.probe is not None and abs(snap.time - p.probe.ts) < 1.0
    # What the dashboard and the diagnostics read from them: the memory split of every GPU.
    assert set(memory_splits(snap)) == set(range(8))


def test_the_demo_keeps_only_the_devices_asked_for() -> None:
    feed = RecordingFeed(series(3, 8), devices={0, 2})
    snap = feed.poll_once()
    assert [d.index for d in snap.devices] == [0, 2]
    assert {p.device_index for p in snap.processes} <= {0, 2} and snap.processes
    assert {lk.device_index for lk in snap.links} <= {0, 2}


def test_a_demo_that_starts_over_says_so() -> None:
    loops = []
    feed = RecordingFeed(series(3), on_loop=lambda: loops.append(feed.loops))
    for _ in range(7):
        feed.poll_once()
    assert loops == [1, 2]


class CountingEngine:
    """Stands in for the diagnostics engine: one finding naming how many ticks it was given."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def update(self, snap: Any) -> list[str]:
        self.times.append(snap.time)
        return [f"{len(self.times)} ticks"]


def test_the_diagnostics_take_one_tick_a_second_at_any_interval() -> None:
    engine = CountingEngine()
    fast = series(50, start=1000.0)
    fast = [dataclasses.replace(s, time=1000.0 + 0.2 * i) for i, s in enumerate(fast)]
    feed = DiagnosedFeed(RecordingFeed(fast, loop=False, retime=False), engine)
    told: list[list[str]] = []
    feed.listener = told.append
    for _ in range(50):
        feed.poll_once()
    # Ten seconds of ticks 0.2 s apart: the engine's window holds 10 of them, not 50.
    assert engine.times == pytest.approx([1000.0 + i for i in range(10)])
    assert told[-1] == ["10 ticks"]


def test_findings_of_one_pass_of_the_demo_do_not_run_into_the_next() -> None:
    demo = RecordingFeed(series(5))
    feed = DiagnosedFeed(demo, CountingEngine(), new_engine=CountingEngine)
    demo.on_loop = feed.reset
    told: list[list[str]] = []
    feed.listener = told.append
    for _ in range(7):
        feed.poll_once()
    assert told == [[f"{n} ticks"] for n in (1, 2, 3, 4, 5, 1, 2)]


class SlowSource:
    """A GPU source whose every poll takes 0.4 s of the virtual clock (a slow NVML call)."""

    name = "slow"

    def __init__(self, clock: VirtualTime) -> None:
        self.clock = clock

    def open(self) -> SourceInfo:
        return SourceInfo("nvml")

    def poll(self, now: float) -> GpuTick:
        self.clock.t += 0.4
        return GpuTick(devices=[h100(0)])

    def close(self) -> None:
        pass


def test_live_polling_keeps_to_the_clock(virtual_time: VirtualTime,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    async def inline(fn: Any, *args: Any) -> Any:
        return fn(*args)

    monkeypatch.setattr(asyncio, "to_thread", inline)
    poller = Poller([SlowSource(virtual_time)], clock=virtual_time)
    poller.open()
    shown = drive(poller.stream(1.0), 100, virtual_time, work=0.3)
    # Polls taking 0.4 s and a dashboard taking 0.3 s a tick: still one tick a second.
    assert [t for t, _ in shown] == pytest.approx([virtual_time.t - 0.3 - 99 + i
                                                   for i in range(100)])
    assert shown[-1][0] - shown[0][0] == pytest.approx(99.0)
