"""What keeps the running dashboard light, checked as behaviour: a tick repaints every cell that
changed (and only lines that changed), start-up's objects are set aside from the garbage
collector once the dashboard has settled, and the input thread sleeps until there is input
yet reads keys, a lone Esc and stops at once."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import os
import random
import selectors
import signal
import sys
import threading
import time
import tty
from typing import Any

import pytest
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Footer

from gputop.feeds import STEADY_GC_THRESHOLD
from gputop.model import Missing
from gputop.model.memory_split import memory_split
from gputop.testing.synthetic import GIB, h100
from gputop.ui.render import (
    Runs,
    changed_parts,
    changed_runs,
    changed_spans,
    content_strip,
    parts_strip,
)
from gputop.ui.widgets import gpu_card
from gputop.ui.widgets.gpu_card import HISTORIES, GpuCard
from tests.helpers.ui import (
    T0,
    make_app,
    node,
    probed_node,
    process,
    repainted,
    sawtooth,
    series,
    show,
    troubled,
)


def _cells(card: GpuCard, y: int) -> list[tuple[str, Any]]:
    return [(ch, seg.style) for seg in card.render_line(y) for ch in seg.text]


def _covered(regions: list[Region], x: int, y: int) -> bool:
    return any(r.y == y and r.x <= x < r.right for r in regions)


async def test_a_tick_repaints_every_changed_cell_of_meters_and_graphs() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        snaps = series(40, util=sawtooth)  # the graphs move every tick
        await show(app, pilot, snaps[:39])
        card = next(c for c in app.query(GpuCard) if c.index == 1)
        before = [_cells(card, y) for y in range(len(HISTORIES))]
        tick = dataclasses.replace(
            node(39, util=sawtooth, devices={1: {"power_draw": 512.0, "mem_used": 70 * 2**30}}),
            time=T0 + 39)
        with repainted(card) as painted:
            app.apply_snapshot(tick)
        after = [_cells(card, y) for y in range(len(HISTORIES))]
        changed = [(x, y) for y in range(len(HISTORIES))
                   for x, (a, b) in enumerate(zip(before[y], after[y])) if a != b]
        meter_end = 33  # the meter's cells, then the graph's
        assert any(x < meter_end for x, _ in changed) and any(x > meter_end for x, _ in changed)
        missed = [(x, y) for x, y in changed if not _covered(painted, x, y)]
        assert missed == []
        # Lines with nothing new are not repainted at all.
        assert {r.y for r in painted} <= {y for _, y in changed}


async def test_every_tick_repaints_what_changed_as_meters_rise_fall_and_come_back() -> None:
    """A card keeps the runs of the meters on screen from one tick to the next: a tick whose
    figures go back to an earlier tick's, or hold still while the graph moves, still repaints
    every cell that changed, and no line with nothing new."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(30, util=sawtooth))
        card = next(c for c in app.query(GpuCard) if c.index == 1)
        figures = [(512.0, 70), (90.0, 2), (512.0, 70), (512.0, 70), (700.0, 79), (90.0, 2)]
        for k, (power, mem) in enumerate(figures):
            before = [_cells(card, y) for y in range(len(HISTORIES) + 2)]
            tick = 30 + k
            snap = node(tick, util=sawtooth, devices={1: {
                "power_draw": power, "mem_used": mem * 2**30, "temp_gpu": 50.0 + mem,
                "clock_sm": 1000 + int(power)}})
            with repainted(card) as painted:
                app.apply_snapshot(dataclasses.replace(snap, time=T0 + tick))
            after = [_cells(card, y) for y in range(len(HISTORIES) + 2)]
            changed = [(x, y) for y in range(len(after))
                       for x, (a, b) in enumerate(zip(before[y], after[y])) if a != b]
            assert changed, k
            assert [(x, y) for x, y in changed if not _covered(painted, x, y)] == [], k
            assert {r.y for r in painted} <= {y for _, y in changed}, k


def _other(v: object) -> object:
    """A value of the same kind as `v` that draws differently (None: not a drawn number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Missing)):
        return None
    if isinstance(v, Missing):
        return 40.0
    return v - 1 if isinstance(v, int) else v / 2 + 1.0


async def test_a_line_kept_while_its_values_hold_still_is_drawn_again_when_one_changes() -> None:
    """A card builds a line again only when one of the values it shows is a new object: any
    one field of a sample that changes alone shows at once (on a slow tick for the temperature
    and clock lines), as the line built afresh from the new sample."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(2))
        card = next(c for c in app.query(GpuCard) if c.index == 0)
        width = card.size.width
        meter = gpu_card.METER_WIDTH + 1
        makers = (gpu_card.util_parts, gpu_card.memory_parts, gpu_card.power_parts,
                  gpu_card.thermal_parts, gpu_card.clocks_parts)
        bases = [h100(0), h100(0, pcie_gen=4, pcie_width=8),  # a link below its best
                 dataclasses.replace(h100(0), temp_mem=Missing("no_permission"),
                                     sm_active=Missing("no_permission"), temp_margin=5.0)]
        checked = set()
        for base in bases:
            for field in dataclasses.fields(base):
                new = _other(getattr(base, field.name))
                if new is None:
                    continue
                for d in (base, dataclasses.replace(base, **{field.name: new}), base):
                    card.update(d, slow=True)
                    for y, make in enumerate(makers):
                        drawn = card.render_line(y)
                        if y < len(HISTORIES):
                            drawn = drawn.crop(0, meter)
                        fresh = parts_strip(card, make(d), meter if y < len(HISTORIES) else width)
                        assert list(drawn) == list(fresh), (field.name, y)
                checked.add(field.name)
        assert {"util_gpu", "sm_active", "mem_used", "mem_reserved", "power_draw", "temp_gpu",
                "temp_margin", "temp_mem", "fan", "clock_sm", "clock_mem_max", "pcie_gen",
                "pcie_width_max"} <= checked


async def test_a_card_drawn_from_its_kept_border_is_the_card_textual_draws() -> None:
    def textual_lines(card: GpuCard) -> list[list[tuple[str, Any]]]:
        card._styles_cache.clear()
        region = card.outer_size.region
        return [[(seg.text, seg.style) for seg in strip]
                for strip in Widget.render_lines(card, region)]

    def kept_lines(card: GpuCard) -> list[list[tuple[str, Any]]]:
        return [[(seg.text, seg.style) for seg in strip]
                for strip in card.render_lines(card.outer_size.region)]

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        snaps = series(30, util=sawtooth)
        await show(app, pilot, snaps[:20])
        cards = sorted(app.query(GpuCard), key=lambda c: c.index)
        for card in cards:
            kept_lines(card)  # what is on screen: the frames are kept from here
        # Ticks that move the graphs and meters, a badge that goes (the title
        # changes, the border's colour not), badges that colour the border, the selection on
        # the GPUs (the border) and another theme.
        await show(app, pilot, snaps[20:25])
        capped = node(25, util=sawtooth, devices={2: {"throttle": ()}})
        await show(app, pilot, [dataclasses.replace(capped, time=T0 + 25)])
        for card in cards:
            assert kept_lines(card) == textual_lines(card), card.index
        await show(app, pilot, snaps[26:30])
        for card in cards:
            assert kept_lines(card) == textual_lines(card), card.index
        app.apply_snapshot(troubled(30))
        await pilot.pause()
        for card in cards:
            assert kept_lines(card) == textual_lines(card), card.index
        await pilot.press("tab", "right")
        app.theme = "textual-light"
        await show(app, pilot, [dataclasses.replace(troubled(31), time=T0 + 31)])
        for card in cards:
            assert kept_lines(card) == textual_lines(card), card.index
        # A part of a card, as the compositor asks when the GPUs scroll.
        card = cards[1]
        part = card.render_lines(Region(2, 1, 10, 3))
        assert [s.text for s in part] == ["".join(t for t, _ in line)[2:12]
                                          for line in textual_lines(card)[1:4]]


def textual_lines(widget: Widget) -> list[list[tuple[str, Any]]]:
    """What Textual itself draws of the whole widget, as (text, style) pairs."""
    widget._styles_cache.clear()
    return [[(seg.text, seg.style) for seg in strip]
            for strip in Widget.render_lines(widget, widget.outer_size.region)]


def kept_lines(widget: Widget) -> list[list[tuple[str, Any]]]:
    """What the widget draws of itself, set in what it kept of Textual's drawing."""
    return [[(seg.text, seg.style) for seg in strip]
            for strip in widget.render_lines(widget.outer_size.region)]


async def test_text_lines_set_in_their_kept_padding_are_the_lines_textual_draws() -> None:
    """The header, the warning bar, the process status and the GPU lines keep the padding
    Textual drew around their text and set each new text in it: through ticks, a warning, the
    selection on a GPU line, and another theme, what they draw is what Textual draws."""
    from gputop.ui.widgets.text_line import TextLine

    def check() -> list[TextLine]:
        lines = [line for line in app.query(TextLine) if line.display and line.outer_size]
        assert {type(line).__name__ for line in lines} >= {"StatusHeader", "WarningBar",
                                                          "GpuRow", "TextLine"}
        for line in lines:
            kept_lines(line)  # what is on screen: the frames are kept from here
        return lines

    app = make_app(layout="compact")
    async with app.run_test(size=(120, 40)) as pilot:
        snaps = series(12, util=sawtooth)
        await show(app, pilot, snaps[:3])
        app.add_warning("the data feed is slow")
        await pilot.pause()
        lines = check()
        await show(app, pilot, snaps[3:8])
        for line in lines:
            assert kept_lines(line) == textual_lines(line), line
        app.dashboard.gpus.focus()
        await pilot.press("down")
        app.apply_snapshot(troubled(8))
        await pilot.pause()
        for line in lines:
            assert kept_lines(line) == textual_lines(line), line
        app.theme = "textual-light"
        await show(app, pilot, snaps[9:12])
        for line in lines:
            assert kept_lines(line) == textual_lines(line), line


async def test_process_rows_set_in_what_textual_drew_beside_them_are_the_rows_it_draws() -> None:
    """The process list keeps what Textual drew beside its rows (the room of its scrollbar)
    and sets each changed row in it: through ticks, the cursor moving and the list scrolling,
    the focus, another theme, a narrower terminal and the scrollbar going away, what it draws
    is what Textual draws."""
    from gputop.ui.widgets.process_table import ProcessTable

    many = tuple(process(3000 + k, k % 8, gpu_mem=(k + 1) * GIB, cpu=float(k)) for k in range(40))

    async def ticks(first: int, count: int, procs: tuple[Any, ...] = many) -> None:
        for t in range(first, first + count):
            await show(app, pilot, [dataclasses.replace(node(t, processes=procs),
                                                        time=T0 + t)])

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await ticks(0, 3)
        table = app.query_one(ProcessTable)
        assert table.show_vertical_scrollbar
        kept_lines(table)  # what is on screen: the frame is kept from here
        await ticks(3, 3)
        assert kept_lines(table) == textual_lines(table)
        table.focus()
        await pilot.press("down", "down", "pagedown", "down")
        await ticks(6, 2)
        assert table.scroll_y > 0
        assert kept_lines(table) == textual_lines(table)
        app.theme = "textual-light"
        await ticks(8, 2)
        assert kept_lines(table) == textual_lines(table)
        await pilot.resize_terminal(90, 40)
        await ticks(10, 2)
        assert kept_lines(table) == textual_lines(table)
        await ticks(12, 2, many[:3])
        assert not table.show_vertical_scrollbar
        assert kept_lines(table) == textual_lines(table)


async def test_card_lines_drawn_from_their_parts_are_the_lines_of_their_content() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(2))
        card = next(c for c in app.query(GpuCard) if c.index == 0)
        split = memory_split(probed_node(1), 0)
        assert split is not None
        devices = [h100(0), h100(1, util_gpu=100.0, mem_used=79 * GIB, power_draw=700.0),
                   dataclasses.replace(h100(2), util_gpu=Missing("unsupported"),
                                       sm_active=Missing("unsupported"),
                                       power_draw=Missing("no_permission"),
                                       mem_used=Missing("gpu_lost"), temp_gpu=Missing("gpu_lost"),
                                       temp_margin=Missing("unsupported"),
                                       temp_mem=Missing("unsupported"),
                                       clock_sm=Missing("no_permission"),
                                       pcie_gen=Missing("unsupported")),
                   h100(3, temp_margin=2.0, fan=40.0, pcie_gen=3, pcie_width=8),
                   h100(4, temp_margin=8.0, temp_mem=Missing("no_permission"), pcie_width=4),
                   h100(5, temp_margin=0.0)]
        for d in devices:
            for parts, line in ((gpu_card.thermal_parts(d), gpu_card.thermal_line(d)),
                                (gpu_card.clocks_parts(d), gpu_card.clocks_line(d)),
                                (gpu_card.util_parts(d), gpu_card.util_line(d)),
                                (gpu_card.memory_parts(d), gpu_card.memory_line(d)),
                                (gpu_card.memory_parts(d, split),
                                 gpu_card.memory_line(d, split)),
                                (gpu_card.power_parts(d), gpu_card.power_line(d))):
                for width in (20, 34, 60):
                    assert list(parts_strip(card, parts, width)) == \
                        list(content_strip(card, line, width)), (d.index, line.plain, width)


async def test_a_meter_change_found_from_its_parts_is_the_change_of_its_line() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(2))
        card = next(c for c in app.query(GpuCard) if c.index == 0)
        devices = [h100(0), h100(0, util_gpu=3.0, mem_used=2 * GIB, power_draw=90.0),
                   h100(1, util_gpu=100.0, mem_used=79 * GIB, power_draw=700.0),
                   dataclasses.replace(h100(2), util_gpu=Missing("unsupported"),
                                       sm_active=Missing("unsupported"),
                                       power_draw=Missing("no_permission"),
                                       mem_used=Missing("gpu_lost"))]
        width = gpu_card.METER_WIDTH + 1
        for make in (gpu_card.util_parts, gpu_card.memory_parts, gpu_card.power_parts):
            for a, b in itertools.product(devices, devices):
                old, new = make(a), make(b)
                assert changed_parts(old, new, width) == changed_spans(
                    parts_strip(card, old, width), parts_strip(card, new, width)), \
                    (make.__name__, old, new)
        # Cells that are not one character each are not compared from the parts.
        assert changed_parts((("GPU 全", ""),), (("GPU ab", ""),), width) is None
        assert changed_parts((("GPU " * 20, ""),), (("GPU", ""),), width) is None


def _random_line(rng: random.Random, width: int, ends: list[int] | None = None) -> Runs:
    if ends is None:
        cuts = rng.sample(range(1, width), k=min(width - 1, rng.randint(0, 4)))
        ends = [*sorted(cuts), width]
    text = "".join(rng.choice("ab ") for _ in range(width))
    return text, ends, [rng.choice("xy") for _ in ends]


def _run_cells(runs: Runs) -> list[tuple[str, Any]]:
    text, ends, run_styles = runs
    starts = [0, *ends[:-1]]
    return [(ch, next(st for st, s, e in zip(run_styles, starts, ends) if s <= x < e))
            for x, ch in enumerate(text)]


def test_the_changed_cells_of_two_lines_cover_every_cell_that_differs_and_start_and_end_at_one(
) -> None:
    """Lines as style runs, with the same runs (a figure that changed within its run) or not:
    each cell whose character or style differs is in a changed run, and each run starts and
    ends at such a cell."""
    rng = random.Random(7)
    for _ in range(500):
        width = rng.randint(1, 30)
        a = _random_line(rng, width)
        b = _random_line(rng, width, a[1] if rng.random() < 0.5 else None)
        differ = [x for x, (p, q) in enumerate(zip(_run_cells(a), _run_cells(b))) if p != q]
        runs = changed_runs(a, b, width)
        assert [x for x in differ if not any(x1 <= x < x2 for x1, x2 in runs)] == []
        assert all(x1 in differ and x2 - 1 in differ for x1, x2 in runs), (a, b, runs)


async def settled(pilot: Any, drawn: list[Any]) -> None:
    """Waits until a pause draws nothing, then forgets what was drawn: what start-up left to
    draw (the footer's keys, late on a busy machine) is not taken for the next tick's."""
    for _ in range(100):
        drawn.clear()
        await pilot.pause(0.05)
        if not drawn:
            return
    raise AssertionError(f"the screen never stopped drawing: {drawn[-5:]}")


async def test_a_tick_draws_the_widgets_that_show_on_the_cells_it_repaints_and_no_others() -> None:
    """The GPUs and the header change, the process list does not: the compositor draws the
    cards and the header, not the process list, the footer, nor the screen, the GPU panel and
    the grid behind the cards (every cell repainted is a card's)."""
    app = make_app(table_interval=3600.0)  # the process list is drawn with the first tick only
    async with app.run_test(size=(200, 50)) as pilot:
        await show(app, pilot, series(3))
        drawn: list[tuple[str, int, int]] = []
        panel = app.dashboard.gpus
        widgets = [app.dashboard, app.dashboard.table, app.dashboard.query_one(Footer),
                   panel, panel.query_one("#gpu-cards"), app.dashboard.header,
                   *app.query(GpuCard)]
        for widget in widgets:
            def render_lines(crop: Region, widget: Widget = widget,
                             draw: Any = widget.render_lines) -> Any:
                drawn.append((type(widget).__name__, crop.y, crop.bottom))
                return draw(crop)

            widget.render_lines = render_lines  # type: ignore[method-assign]
        await settled(pilot, drawn)
        await show(app, pilot, [node(3)])
        names = {name for name, _, _ in drawn}
        assert {"GpuCard", "StatusHeader"} <= names
        assert not names & {"ProcessTable", "Footer", "DashboardScreen", "GpuPanel", "Grid"}
        # A card is drawn from its first changed line to its last, not whole.
        assert all(bottom - top < gpu_card.CARD_HEIGHT for name, top, bottom in drawn
                   if name == "GpuCard")


async def test_a_cell_no_widget_covers_is_drawn_from_the_widget_behind() -> None:
    """Between two cards is the grid: a repaint of cells there and in a card draws both, each
    on its own cells, and the terminal gets what a full repaint shows."""
    from textual._compositor import ChopsUpdate

    app = make_app(table_interval=3600.0)
    async with app.run_test(size=(200, 50)) as pilot:
        await show(app, pilot, series(3))
        grid = app.dashboard.gpus.query_one("#gpu-cards")
        first, second = sorted(app.query(GpuCard), key=lambda c: c.index)[:2]
        y = first.region.y + 2
        gap = Region(first.region.right, y, second.region.x - first.region.right, 1)
        assert gap.width > 0 and grid.region.contains_region(gap)
        drawn: list[str] = []
        for widget in (app.dashboard, grid, first, second):
            def render_lines(crop: Region, widget: Widget = widget,
                             draw: Any = widget.render_lines) -> Any:
                drawn.append(type(widget).__name__)
                return draw(crop)

            widget.render_lines = render_lines  # type: ignore[method-assign]
        compositor = app.screen._compositor
        compositor._dirty_regions.update({gap.expand((1, 0)), Region(first.region.x + 3, y, 4, 1)})
        update = compositor.render_update(screen_stack=app._background_screens)
        assert isinstance(update, ChopsUpdate)
        assert drawn == ["GpuCard", "GpuCard", "Grid"]  # front to back; not the screen
        full = compositor.render_strips()
        assert {row for row, _, _ in update.spans} == {y}
        for _y, x1, x2 in update.spans:
            for x in range(x1, x2):
                assert _cell(update.chops[y].items(), x) == _cell([(0, full[y])], x)


def _cell(line: Any, x: int) -> tuple[str, Any]:
    """The character and style of cell `x` of a line drawn as (start, strip) pieces."""
    for start, strip in line:
        if strip is not None and start <= x < start + strip.cell_length:
            pos = start
            for text, style, _ in strip:
                if pos <= x < pos + len(text):
                    return text[x - pos], style
                pos += len(text)
    raise AssertionError(f"no line drawn at {x}")


async def test_lines_drawn_in_a_tick_are_freed_without_the_garbage_collector() -> None:
    """A line the compositor did not cut kept itself among its divisions: a reference cycle,
    so every line a tick drew waited for the garbage collector, with its segments and caches."""
    from textual.strip import Strip

    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        snaps = series(12, util=sawtooth)
        await show(app, pilot, snaps[:6])
        gc.collect()
        gc.disable()
        try:
            await show(app, pilot, snaps[6:])
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = [o for o in gc.garbage if isinstance(o, Strip)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert [strip.text for strip in left] == []


async def test_settling_sets_start_up_aside_collects_less_often_and_ticks_go_on() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(3))
        gc.unfreeze()
        threshold = gc.get_threshold()
        try:
            app.settle()
            assert gc.get_freeze_count() > 0
            assert gc.get_threshold()[0] >= STEADY_GC_THRESHOLD > threshold[0]
            await show(app, pilot, [node(3, util=lambda g, t: 12.0)])
            card = next(c for c in app.query(GpuCard) if c.index == 0)
            assert " 12%" in "".join(seg.text for seg in card.render_line(0))
        finally:
            gc.unfreeze()
            gc.set_threshold(*threshold)


async def test_the_input_thread_sleeps_until_a_key_yet_reads_keys_escape_and_stops(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.drivers.linux_driver import LinuxDriver

    from gputop.ui.app import GputopApp
    from gputop.ui.textual_private import quiet_linux_driver

    quiet = quiet_linux_driver(LinuxDriver)
    assert quiet is not None and issubclass(quiet, LinuxDriver)
    if os.environ.get("TEXTUAL_DRIVER") is None and sys.platform != "win32":
        assert GputopApp(None).driver_class is quiet
    saved = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT)}
    waits: list[float | None] = []
    select = selectors.SelectSelector.select

    def counted(self: Any, timeout: float | None = None) -> Any:
        waits.append(timeout)
        return select(self, timeout)

    monkeypatch.setattr(selectors.SelectSelector, "select", counted)
    master, slave = os.openpty()
    tty.setraw(slave)  # keys as they are typed, as Textual sets its terminal
    try:
        driver = quiet(GputopApp(None))
        driver.fileno = slave
        got: list[Any] = []
        driver.process_message = got.append  # type: ignore[method-assign]
        driver._disable_mouse_support = lambda: None  # type: ignore[method-assign]
        driver._wake = os.pipe()
        thread = driver._key_thread = threading.Thread(target=driver.run_input_thread,
                                                       daemon=True)
        thread.start()
        os.write(master, b"q")
        await until(lambda: any(getattr(e, "key", None) == "q" for e in got))
        os.write(master, b"\x1b")  # a lone Esc: told apart from a sequence by its timeout
        await until(lambda: any(getattr(e, "key", None) == "escape" for e in got))
        await asyncio.sleep(0.2)
        before = len(waits)
        await asyncio.sleep(0.5)  # no key: the thread waits in one select, with no timeout
        assert len(waits) - before <= 1 and waits[-1] is None and thread.is_alive()

        def unstick() -> None:  # fails the test below instead of hanging the suite
            driver.exit_event.set()
            os.write(driver._wake[1], b"\0")

        watchdog = threading.Timer(3.0, unstick)
        watchdog.start()
        started = time.monotonic()
        driver.disable_input()
        watchdog.cancel()
        assert not thread.is_alive() and time.monotonic() - started < 0.5
    finally:
        os.close(master)
        os.close(slave)
        for s, handler in saved.items():
            signal.signal(s, handler)


async def until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)
