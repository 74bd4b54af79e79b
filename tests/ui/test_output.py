"""What the dashboard writes to the terminal, read back through a small terminal emulator.

A tick repaints only the cells that changed, so over SSH it costs a few hundred bytes, not a
screen. These tests replay every byte the app wrote into an emulated terminal and check that
the result is exactly what a full repaint draws (characters and styles, cell by cell), and
that a steady tick of 8 GPUs stays within its budget of bytes."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import textual.constants
from rich.cells import cell_len
from textual._compositor import CompositorUpdate  # the update the app hands to the driver

from gputop.feeds.playback import demo_path
from gputop.model import Snapshot
from gputop.recording import read_recording
from gputop.ui.app import GputopApp
from gputop.ui.textual_private import install
from tests.helpers.ui import Clock, node, process, sawtooth, series

needs_demo = pytest.mark.skipif(not demo_path().exists(), reason="the demo recording is not built")

_TOKEN = re.compile(r"\x1b\[(\d+);(\d+)H|\x1b\[([0-9;]*)m|(\n)|([^\x1b\n]+)|(\x1b)")


class Terminal:
    """Cursor moves, SGR styles and text: all that Textual's screen updates contain."""

    def __init__(self, width: int, height: int) -> None:
        self.cells = [[(" ", "")] * width for _ in range(height)]

    def write(self, data: str) -> None:
        x = y = 0
        style = ""
        for m in _TOKEN.finditer(data):
            move, sgr, _newline, text, other = m.group(1), m.group(3), m.group(4), m.group(5), \
                m.group(6)
            assert other is None, f"unexpected escape at {data[m.start():m.start() + 20]!r}"
            if move:
                y, x = int(m.group(1)) - 1, int(m.group(2)) - 1
            elif sgr is not None:
                style = "" if sgr in ("", "0") else sgr
            elif text:
                for ch in text:
                    self.cells[y][x] = (ch, style)
                    if cell_len(ch) == 2:
                        self.cells[y][x + 1] = ("", style)
                    x += cell_len(ch)

    def text(self) -> str:
        return "\n".join("".join(ch for ch, _ in row) for row in self.cells)


class Recorder:
    """Every update an app sends to its terminal (a headless app renders none itself)."""

    def __init__(self, app: GputopApp) -> None:
        self.app = app
        self.writes: list[str] = []
        display = app._display

        def record(screen: Any, renderable: Any) -> None:
            if isinstance(renderable, CompositorUpdate) and not app._batch_count:
                self.writes.append(renderable.render_segments(app.console))
            display(screen, renderable)

        app._display = record  # type: ignore[method-assign]

    def full_repaint(self) -> str:
        update = self.app.screen._compositor.render_update(full=True)
        assert update is not None
        return update.render_segments(self.app.console)


async def settle(pilot: Any, recorder: Recorder) -> None:
    """Until the app has nothing left to paint (the scroll bar comes a frame after the rows)."""
    for _ in range(10):
        before = len(recorder.writes)
        await pilot.pause()
        if len(recorder.writes) == before:
            return


@pytest.fixture(autouse=True)
def colors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """24-bit colour, the longest escape sequences (a style keeps the sequence it was first
    written with, so this also holds after other tests): byte counts are an upper bound."""
    monkeypatch.setattr(textual.constants, "COLOR_SYSTEM", "truecolor")
    yield


@cache
def demo() -> list[Snapshot]:
    return read_recording(demo_path()).snapshots


async def play(snaps: list[Snapshot], size: tuple[int, int],
               warm: int) -> tuple[Recorder, Terminal, list[int]]:
    """Show `snaps` one tick at a time; the terminal as written, and the bytes of each tick
    after the first `warm`."""
    clock = Clock(snaps[0].time)
    app = GputopApp(None, clock=clock, table_interval=0.0)
    recorder = Recorder(app)
    sizes = []
    async with app.run_test(size=size) as pilot:
        for i, snap in enumerate(snaps):
            clock.t = snap.time + 0.4
            before = len(recorder.writes)
            app.apply_snapshot(snap)
            await pilot.pause()
            if i >= warm:
                sizes.append(sum(len(w.encode()) for w in recorder.writes[before:]))
        terminal = Terminal(*size)
        for data in recorder.writes:
            terminal.write(data)
        full = Terminal(*size)
        full.write(recorder.full_repaint())
        assert terminal.cells == full.cells, terminal.text()
    return recorder, terminal, sizes


async def test_a_clock_that_ticks_sends_the_digit_that_changed() -> None:
    """The header shows the next second: the terminal gets that digit, not the header from its
    first cell (which is what Textual alone sends)."""
    assert install()
    snap = node(5)
    app = GputopApp(None, clock=Clock(snap.time), table_interval=0.0)
    recorder = Recorder(app)
    async with app.run_test(size=(120, 40)) as pilot:
        app.apply_snapshot(snap)
        await settle(pilot, recorder)
        before = len(recorder.writes)
        app.dashboard.header.set_snapshot(dataclasses.replace(snap, time=snap.time + 1))
        await pilot.pause()
        written = "".join(recorder.writes[before:])
    assert "6" in written
    assert 0 < len(written.encode()) <= 48


@needs_demo
@pytest.mark.parametrize("size, budget", [((120, 40), 8192), ((80, 24), 4096)])
async def test_a_steady_tick_of_eight_gpus_writes_a_few_kilobytes(
        size: tuple[int, int], budget: int) -> None:
    """The demo's training node going from steady to a sawtooth load (bars, graphs and the
    PWR CAP badge change every tick), the process table refreshed every tick: what the terminal
    shows after 50 ticks of partial repaints is what a full repaint draws, and a tick after the
    graphs filled costs at most `budget` bytes on average (Textual alone sends 3 to 4 times
    that)."""
    _, terminal, sizes = await play(demo()[100:150], size, warm=30)
    assert "GPU" in terminal.text()
    assert 0 < sum(sizes) / len(sizes) <= budget


async def test_a_layout_switch_and_a_resize_leave_the_screen_as_a_full_repaint_draws() -> None:
    """Cells repainted tick by tick, the GPUs switched from cards to lines and back (each
    drawn anew) and the terminal made narrower (the cards drawn at another width): the terminal
    ends with exactly what a full repaint draws."""
    assert install()
    snaps = series(40, util=sawtooth)
    clock = Clock(snaps[0].time)
    app = GputopApp(None, clock=clock, table_interval=0.0)
    recorder = Recorder(app)
    async with app.run_test(size=(120, 40)) as pilot:
        for i, snap in enumerate(snaps):
            if i in (10, 20):
                await pilot.press("v")  # lines, then cards again
            if i == 30:
                await pilot.resize_terminal(100, 40)
            clock.t = snap.time + 0.4
            app.apply_snapshot(snap)
            await pilot.pause()
        await settle(pilot, recorder)
        assert app.dashboard.gpus.mode == "cards"
        terminal = Terminal(120, 40)  # the writes from before the resize run wider
        for data in recorder.writes:
            terminal.write(data)
        full = Terminal(100, 40)
        full.write(recorder.full_repaint())
    assert [row[:100] for row in terminal.cells] == full.cells, terminal.text()


async def test_wide_characters_in_process_names_are_repainted_whole() -> None:
    """A command line in CJK (two cells a character) before a CPU % that changes every tick:
    the terminal still ends up with exactly the full repaint."""
    snaps = []
    for tick in range(12):
        procs = tuple(
            process(4000 + i, i, cpu=50.0 + (tick * 7 + i) % 40, user="研究者",
                    cmdline=("python", f"训练_{'模型' * (tick % 3 + 1)}.py"))
            for i in range(8))
        snaps.append(dataclasses.replace(node(tick), processes=procs))
    _, terminal, sizes = await play(snaps, (100, 40), warm=1)
    assert "训练_模型" in terminal.text()
    assert all(sizes)
