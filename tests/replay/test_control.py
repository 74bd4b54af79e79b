"""`gputop replay` as a user drives it: pause, step, seek to a time or a tick, play faster, with
the Findings the engine had at that moment; and a recording followed while it is written.

The controls and the engine-at-a-tick are plain objects tested without an app; the keys are
tested through Pilot on the bundled demo (GPU 5 runs hot around tick 500, the data loader
starves every GPU around tick 300, neither has happened at tick 100)."""

from __future__ import annotations

import asyncio
import gzip
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputop.diagnose import Engine, default_engine
from gputop.diagnose.rules.memory import GROWTH
from gputop.diagnose.rules.starvation import STARVATION
from gputop.diagnose.rules.throttle import THERMAL
from gputop.diagnose.types import Finding
from gputop.feeds.playback import demo_path
from gputop.recording import RecordingWriter
from gputop.recording.index import RecordingIndex
from gputop.replay.control import SPEEDS, ReplayControl, ReplayFeed
from gputop.replay.seek import SeekError, parse_duration, parse_seek
from gputop.replay.timeline import FindingsTimeline
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series
from tests.helpers.waiting import until, within

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
TIMES = [T0 + i for i in range(600)]


pytestmark = pytest.mark.usefixtures("utc")


def story_engine() -> Engine:
    """The rules the demo's story needs (and one with a long clearing time): the whole set
    is tested over a shorter stretch below."""
    return Engine([THERMAL, STARVATION, GROWTH])


@pytest.fixture(scope="module")
def demo() -> Iterator[RecordingIndex]:
    with RecordingIndex(demo_path()) as index:
        yield index


def keys(found: list[Finding]) -> set[tuple[str, int | None]]:
    return {(f.id, f.device) for f in found}


def straight(index: RecordingIndex, engine: Engine, ticks: set[int]) -> dict[int, list[Finding]]:
    """The open Findings at `ticks` of one run of the engine from the start."""
    reader = index.reader()
    out = {}
    for t in range(max(ticks) + 1):
        found = engine.update(reader.snapshot(t))
        if t in ticks:
            out[t] = found
    reader.close()
    return out




def write(path: Path, n: int, **kw: Any) -> tuple[RecordingWriter, list[Any]]:
    snaps = series(n)
    writer = RecordingWriter(path, **kw, summarizer=SummaryKeeper())
    for s in snaps:
        writer.write(s)
    return writer, snaps


# ---------------------------------------------------------------------------------------------
# Where to go


def test_seek_to_a_clock_time_an_offset_or_a_tick_number() -> None:
    assert parse_seek("08:04:20", TIMES, 0) == 260
    assert parse_seek("8:04", TIMES, 0) == 240
    assert parse_seek("2027-01-15 08:01:00", TIMES, 0) == 60
    assert parse_seek("-5m", TIMES, 400) == 100
    assert parse_seek("+90s", TIMES, 100) == 190
    assert parse_seek("-1:30", TIMES, 200) == 110
    assert parse_seek("+1h", TIMES, 100) == 599  # as far as the recording goes
    assert parse_seek("-1h30m", TIMES, 100) == 0
    assert parse_seek("260", TIMES, 0) == 259  # ticks count from 1, as the header shows them
    assert parse_seek("tick 1", TIMES, 300) == 0
    assert parse_seek("#600", TIMES, 0) == 599
    assert parse_seek(" start ", TIMES, 300) == 0
    assert parse_seek("END", TIMES, 0) == 599


@pytest.mark.parametrize(("text", "says"), [
    ("0", "tick 0 is not in the recording (1 to 600)"),
    ("601", "(1 to 600)"),
    ("09:30", "09:30 is not in the recording (08:00:00 to 08:09:59)"),
    ("25:00", "is not a time"),
    ("banana", "is not a time (10:04:20), an offset (-5m, +90s, +1h30m) or a tick number"),
    ("", "type a time"),
    ("+5 parsecs", "not a duration: '5 parsecs'"),
])
def test_a_place_that_is_not_in_the_recording_is_said(text: str, says: str) -> None:
    with pytest.raises(SeekError, match=re.escape(says)):
        parse_seek(text, TIMES, 0)


def test_a_recording_over_midnight_finds_the_right_day() -> None:
    start = T0 + 15 * 3600 + 55 * 60  # 23:55
    times = [start + 10 * i for i in range(61)]  # to 00:05 the next day
    assert parse_seek("23:58", times, 0) == 18
    assert parse_seek("00:01", times, 0) == 36
    two_days = [T0 + 60 * i for i in range(2 * 24 * 60)]  # 08:00 to 07:59 two days later
    assert parse_seek("09:00", two_days, 0) == 60
    assert parse_seek("09:00", two_days, 2000) == 60 + 24 * 60  # the 09:00 nearest to here
    control = ReplayControl(times)
    control.seek(36)
    assert "2027-01-16 00:01:00" in control.status()  # two days: the date is said


def test_durations() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("1:02:03") == 3723
    assert parse_duration("250ms") == 0.25
    assert parse_duration("2d") == 172800


# ---------------------------------------------------------------------------------------------
# Pause, step, speed


def test_space_pauses_and_resumes_and_a_step_pauses() -> None:
    c = ReplayControl(TIMES)
    assert not c.paused and c.position == 0
    c.toggle_pause()
    assert c.paused
    c.toggle_pause()
    assert not c.paused
    c.step(1)
    assert (c.position, c.paused) == (1, True)
    c.step(-5)
    assert c.position == 0  # not before the start
    c.to_end()
    c.step(1)
    assert c.position == 599  # nor after the end
    c.to_start()
    assert c.position == 0


def test_speed_doubles_and_halves_between_a_quarter_and_64x() -> None:
    c = ReplayControl(TIMES)
    for _ in range(20):
        c.faster()
    assert c.speed == 64
    for _ in range(20):
        c.slower()
    assert c.speed == 0.25
    assert tuple(0.25 * 2 ** i for i in range(9)) == SPEEDS


def test_playing_moves_speed_ticks_per_interval() -> None:
    c = ReplayControl(TIMES)
    c.faster()
    c.faster()  # 4x
    c.play(1.0, 1.0)
    assert c.position == 4
    c.play(0.1, 1.0)
    assert c.position == 4  # 0.4 of a tick: not shown yet
    assert c.until_next(1.0) == pytest.approx(0.15)
    c.play(0.15, 1.0)
    assert c.position == 5
    c.toggle_pause()
    c.play(10.0, 1.0)
    assert c.position == 5
    assert c.until_next(1.0) is None


def test_the_end_stops_and_space_plays_again_from_the_start() -> None:
    c = ReplayControl(TIMES)
    c.seek(598)
    c.play(5.0, 1.0)
    assert (c.position, c.paused) == (599, True)
    assert c.status().endswith("■ end")
    c.toggle_pause()
    assert (c.position, c.paused) == (0, False)


def test_the_header_says_where_the_replay_is_never_how_old_the_data_is() -> None:
    c = ReplayControl(TIMES)
    c.seek(260)
    c.faster()
    c.faster()
    c.toggle_pause()
    assert c.status(now=T0 + 86400) == "replay 08:04:20 (tick 261/600) 4x ⏸ paused"
    c.toggle_pause()
    assert c.status(now=T0 + 86400) == "replay 08:04:20 (tick 261/600) 4x ▶"
    assert "08:00:00 to 08:09:59, 600 ticks" in c.span_text()


def test_following_shows_new_ticks_at_once_unless_paused() -> None:
    times = list(TIMES[:10])
    c = ReplayControl(times, follow=True)
    assert c.position == 9  # a followed recording opens at its newest tick
    assert c.status(now=times[-1] + 1).endswith("● following")
    times += TIMES[10:13]
    c.grew(10)
    assert c.position == 12
    assert "no new tick for 10 min" in c.status(now=times[-1] + 600)
    c.toggle_pause()
    times += TIMES[13:15]
    c.grew(13)
    assert c.position == 12  # paused: the new ticks wait
    c.to_end()
    assert (c.position, c.paused) == (14, False)  # End: live again


# ---------------------------------------------------------------------------------------------
# The Findings at a tick


def test_findings_after_a_seek_are_those_of_a_straight_run(demo: RecordingIndex) -> None:
    timeline = FindingsTimeline(demo, story_engine(), remember=1)
    try:
        # Forward only, the engine sees every tick once: a straight run.
        expected = {t: timeline.at(t) for t in (100, 300, 499)}
        assert timeline.restores == 0
        for tick in (300, 100, 499):  # back, back, forward past saved states
            assert timeline.at(tick) == expected[tick], tick
        assert timeline.restores >= 3 and timeline.saved == 9  # one a minute
    finally:
        timeline.close()
    assert ("thermal.sw", 5) in keys(expected[499])
    assert {d for i, d in keys(expected[300]) if i.startswith("loader.")} == set(range(8))
    assert not {i for i, _ in keys(expected[100]) if i.startswith(("loader.", "thermal."))}


def test_every_rule_keeps_its_state_across_a_restore(demo: RecordingIndex) -> None:
    expected = straight(demo, default_engine(plugins=False), {30, 70, 125, 130})
    timeline = FindingsTimeline(demo, default_engine(plugins=False), every=20, remember=1)
    try:
        assert timeline.at(130) == expected[130]
        assert timeline.at(70) == expected[70]
        assert timeline.at(30) == expected[30]
        assert timeline.at(125) == expected[125]
        assert timeline.restores >= 2
    finally:
        timeline.close()


# ---------------------------------------------------------------------------------------------
# Reading a recording in any order, and while it grows


def test_any_tick_reads_the_same_as_a_straight_read(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    writer, snaps = write(path, 40, keyframe_every=7)
    writer.close()
    with RecordingIndex(path) as index:
        assert index.ticks == 40 and index.warning is None and index.finished
        assert list(index.times) == [s.time for s in snaps]
        reader = index.reader()
        for t in (39, 0, 13, 14, 12, 27, 1, 39):
            assert reader.snapshot(t) == snaps[t], t
        reader.close()


def test_rare_keyframes_still_give_places_to_start_from(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gputop.recording.index.MAX_GAP", 8)
    path = tmp_path / "foreign.gputop"
    writer, snaps = write(path, 30, keyframe_every=10**9)  # one keyframe, then only patches
    writer.close()
    with RecordingIndex(path) as index:
        assert index._cp_ticks == [0, 8, 16, 24]
        reader = index.reader()
        for t in (29, 17, 3, 24, 23):
            assert reader.snapshot(t) == snaps[t], t
        reader.close()


def test_a_damaged_recording_is_read_up_to_the_damage(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    snaps = series(30)
    writer = RecordingWriter(path, summarizer=SummaryKeeper())
    for s in snaps[:20]:
        writer.write(s)
    cut = writer.bytes_written
    for s in snaps[20:]:
        writer.write(s)
    writer.close()
    data = bytearray(path.read_bytes())
    data[cut + 4:cut + 44] = bytes(40)
    path.write_bytes(bytes(data))
    with RecordingIndex(path) as index:
        assert index.ticks == 20
        assert "damaged" in (index.warning or "")
        reader = index.reader()
        assert reader.snapshot(19) == snaps[19]
        reader.close()


def test_follow_reads_ticks_appended_after_opening(tmp_path: Path) -> None:
    path = tmp_path / "live.gputop"
    snaps = series(8)
    writer = RecordingWriter(path, summarizer=SummaryKeeper())
    for s in snaps[:5]:
        writer.write(s)
    with RecordingIndex(path, follow=True) as index:
        assert index.ticks == 5 and index.warning is None and not index.finished
        for s in snaps[5:]:
            writer.write(s)
        assert index.refresh() == 3
        reader = index.reader()
        assert reader.snapshot(7) == snaps[7] and reader.snapshot(2) == snaps[2]
        reader.close()
        writer.close()
        assert index.refresh() == 0 and index.finished


def test_a_tick_half_written_waits_until_it_is_whole(tmp_path: Path) -> None:
    whole = tmp_path / "whole.gputop"
    writer, snaps = write(whole, 12)
    writer.close()
    data = whole.read_bytes()
    growing = tmp_path / "growing.gputop"
    growing.write_bytes(data[:10])  # not even the header yet
    with RecordingIndex(growing, follow=True) as index:
        assert index.header is None and index.ticks == 0
        seen = []
        with growing.open("ab") as f:
            for i in range(10, len(data), 13):
                f.write(data[i:i + 13])
                f.flush()
                index.refresh()
                seen.append(index.ticks)
        assert seen == sorted(seen) and set(seen) == set(range(13))  # one tick at a time
        assert index.finished
        reader = index.reader()
        assert [reader.snapshot(t) for t in range(12)] == snaps
        reader.close()


def test_the_feed_follows_a_recording_being_written(tmp_path: Path) -> None:
    path = tmp_path / "live.gputop"
    snaps = series(10)
    writer = RecordingWriter(path, meta={"interval": 1.0}, summarizer=SummaryKeeper())
    for s in snaps[:4]:
        writer.write(s)

    async def run() -> tuple[list[float], str]:
        index = RecordingIndex(path, follow=True)
        feed = ReplayFeed(index, follow=True, engine=Engine([]))
        seen: list[float] = []

        async def consume() -> None:
            async for snap in feed.stream(0.05):
                seen.append(snap.time)

        task = asyncio.create_task(consume())
        try:
            await within(until(lambda: bool(seen)))
            assert seen == [snaps[3].time]  # the newest tick at once
            for s in snaps[4:]:
                writer.write(s)
            await within(until(lambda: seen[-1] == snaps[-1].time))
            writer.close()
            await within(until(lambda: not feed.control.follow))  # the writer has finished
            return seen, feed.status(now=snaps[-1].time + 600)
        finally:
            task.cancel()
            feed.close()
            index.close()

    seen, status = asyncio.run(run())
    assert seen == sorted(seen) and seen[-1] == snaps[-1].time
    assert status.endswith("(tick 10/10) 1x ■ end")


def test_replay_modules_do_not_import_textual() -> None:
    code = ("import sys, gputop.replay.control, gputop.recording.index\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_a_replay_of_a_growing_file_without_follow_says_it_is_unfinished(tmp_path: Path) -> None:
    path = tmp_path / "cut.gputop"
    writer, _ = write(path, 3)  # never closed: no end marker
    with RecordingIndex(path) as index:
        assert index.ticks == 3 and "ends without its end marker" in (index.warning or "")
    writer.close()
    # The header, the 3 ticks, then the summary and its footer that closing appends.
    assert gzip.decompress(path.read_bytes()).count(b"\n") == 6


# ---------------------------------------------------------------------------------------------
# The keys, through Pilot


def screen_text(app: Any) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_replay_keys_drive_the_dashboard(demo: RecordingIndex) -> None:
    from gputop.ui.app import GputopApp
    from gputop.ui.screens.help import HelpScreen
    from gputop.ui.screens.replay import SeekScreen

    feed = ReplayFeed(demo, paused=True, engine=Engine([STARVATION]))
    app = GputopApp(feed, replay=feed, readonly=True, clock=lambda: T0 + 10**6,
                    table_interval=0.0)
    shown: list[list[Any]] = []
    app.set_findings = lambda found: shown.append(list(found))  # type: ignore[method-assign]
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await within(feed.settled())
            header = app.dashboard.header
            assert "replay 10:00:00 (tick 1/600) 1x ⏸ paused" in header.content.plain
            assert "STALE" not in header.content.plain and "live" not in header.content.plain
            # The footer is drawn once the screen has settled (later on a busy machine).
            await within(until(lambda: "Play/pause" in screen_text(app).splitlines()[-1]))
            footer = screen_text(app).splitlines()[-1]
            assert "Play/pause" in footer and "Go to" in footer

            await pilot.press("full_stop", "full_stop", "comma")
            await within(feed.settled())
            assert feed.shown == 1 and "(tick 2/600)" in header.content.plain
            await pilot.press("plus", "plus", "minus", "plus")
            assert feed.control.speed == 4 and " 4x " in header.content.plain

            await pilot.press("g")
            assert isinstance(app.screen, SeekScreen)
            app.screen.input.value = "banana"
            await pilot.press("enter")
            assert isinstance(app.screen, SeekScreen)  # stays open and says why
            assert "is not a time" in screen_text(app)
            app.screen.input.value = "10:05:00"  # tick 301: the loader starves every GPU
            await pilot.press("enter")
            await within(feed.settled())
            assert app.screen is app.dashboard and feed.shown == 300
            assert "10:05:00 (tick 301/600)" in header.content.plain
            assert {d for i, d in keys(shown[-1]) if i.startswith("loader.")} == set(range(8))
            reader = demo.reader()
            util = [reader.devices(t)[0].util_gpu for t in range(201, 301)]
            reader.close()
            await within(until(lambda: len(app.histories[0].util) == 301))
            assert list(app.histories[0].util)[-100:] == util  # the graphs lead up to it

            await pilot.press("comma")
            await within(until(lambda: feed.shown == 299))
            assert list(app.histories[0].util)[-1] == util[-2]
            await pilot.press("end")  # taken before the process list's own End
            await within(until(lambda: feed.shown == 599))
            await pilot.press("home")
            await within(until(lambda: feed.shown == 0))
            assert len(app.histories[0].util) == 1

            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = screen_text(app)
            assert "Replay" in text and "pause / play the recording" in text
            assert re.search(r"│ Space +pause", text)
    finally:
        feed.close()


async def test_replay_keys_are_not_there_live() -> None:
    from gputop.ui.app import GputopApp

    app = GputopApp(None, clock=lambda: T0, table_interval=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "g", "end")
        assert app.screen is app.dashboard
        assert app.check_action("replay_pause", ()) is False
        assert "Go to" not in screen_text(app)
