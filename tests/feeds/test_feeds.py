"""Feeds: the demo and replay keep a recording's pace; recording alongside the dashboard survives
a full disk while monitoring goes on."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

from gputop.errors import RecordingError
from gputop.feeds.playback import RecordingFeed
from gputop.feeds.tee import RecordingTee
from gputop.recording import RecordingWriter, read_recording
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series


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
