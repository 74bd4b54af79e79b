"""The dashboard over the bundled recording, driven with its keys as a user would: every view
opens and closes, read-only refuses to kill, untrusted text stays text, and `q` quits."""

from __future__ import annotations

import dataclasses

import pytest

from gputop.feeds.playback import RecordingFeed, demo_path
from gputop.ui.app import GputopApp
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.screens.help import HelpScreen
from gputop.ui.screens.topology import TopologyScreen


@pytest.fixture(scope="module")
def training_snapshot():
    feed = RecordingFeed.from_file(demo_path(), retime=False)
    feed.skip(120)
    return feed.poll_once()


async def test_every_view_opens_closes_and_q_quits(training_snapshot) -> None:
    app = GputopApp(None, clock=lambda: training_snapshot.time + 1)
    async with app.run_test(size=(120, 40)) as pilot:
        app.apply_snapshot(training_snapshot)
        await pilot.pause()
        for key, screen in (("question_mark", HelpScreen), ("t", TopologyScreen),
                            ("d", DetailScreen)):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, screen), key
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is app.dashboard
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code in (0, None)


async def test_readonly_never_kills(training_snapshot) -> None:
    app = GputopApp(None, readonly=True, clock=lambda: training_snapshot.time + 1)
    async with app.run_test(size=(120, 40)) as pilot:
        app.apply_snapshot(training_snapshot)
        await pilot.pause()
        app.request_kill(training_snapshot.processes[0])
        await pilot.pause()
        assert app.screen is app.dashboard  # no confirmation dialog
        assert any("read-only" in m for m in app.messages)


async def test_hostile_process_text_is_shown_as_text(training_snapshot) -> None:
    evil = dataclasses.replace(training_snapshot.processes[0], user="[b]root[/b]",
                               cmdline=("python", "\x1b]0;pwned\x07", "[red]x[/red]"))
    snap = dataclasses.replace(training_snapshot,
                               processes=(evil, *training_snapshot.processes[1:]))
    app = GputopApp(None, clock=lambda: snap.time + 1)
    async with app.run_test(size=(160, 48)) as pilot:
        app.apply_snapshot(snap)
        await pilot.pause(0.3)
        svg = app.export_screenshot()
    assert "\x1b" not in svg and "\x07" not in svg
    assert "[red]x[/red]" in svg.replace("&#160;", " ")
    assert "[b]ro" in svg.replace("&#160;", " ")  # clipped to its column, but not bold markup


async def test_compact_layout_fits_8_gpus_at_80x24(training_snapshot) -> None:
    app = GputopApp(None, clock=lambda: training_snapshot.time + 1)
    async with app.run_test(size=(80, 24)) as pilot:
        app.apply_snapshot(training_snapshot)
        await pilot.pause(0.3)
        text = app.export_screenshot().replace("&#160;", " ")
    for i in range(8):
        assert f"{i}" in text
    assert text.count("H100") >= 8
