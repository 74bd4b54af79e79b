"""Workarounds that reach into Textual's private API, all in this one file, each checking that
Textual still has the shape it was written against and otherwise leaving Textual as it is.

A partial repaint writes the cells that changed, not the line up to them.

Textual turns a repaint of a region into, for each screen line, the widget's line from the
widget's left edge up to the region's end (textual issue #5625): a card whose power figure
changed at column 40 rewrites its border, labels and bars before it, each style run with its
own escape sequence. The widgets here refresh exactly the cells that changed
(`render.changed_spans`), so the update starts where the region starts: at the first dirty
cell, or at the start of its segment where a character two cells wide could be cut. With 8 GPUs
this cuts what a tick sends to the terminal by more than half (bench/ui_bench.py).

Textual's update class is private; `install` checks that it still has the shape this code was
written against and otherwise leaves Textual as it is (tests/ui/test_output.py then fails).

A partial repaint draws the widgets that show on the cells it repaints, and only on their rows.

Textual draws a partial repaint from every widget whose clip overlaps the rectangle around the
dirty regions, and each of those whole: a widget's clip is mostly the screen, so a tick that
changes the header and the GPU cards also draws every line of the process table, the footer,
and the screen, the GPU panel and the grid behind the cards, for cells it does not send
(`Compositor._get_renders`). `_renders_on_rows` draws, front to back, only the widgets that
show on a dirty cell that no widget in front of them covers, each on the rows of those cells:
the lines sent are the same, drawn from the same widgets in the same order.

`repaint_now`: a widget that repaints a few cells every tick hands the repaint to the screen
at once, instead of waking its own message loop to do it when idle (with 8 GPU cards, eight
wake-ups a tick).

Below them, `quiet_linux_driver`: the terminal's input thread sleeps until there is input instead
of waking ten times a second (tests/ui/test_steady.py)."""

from __future__ import annotations

import inspect
import linecache
import os
import selectors
from codecs import getincrementaldecoder
from collections.abc import Iterable, Iterator
from typing import Any

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from textual.dom import NoScreen
from textual.geometry import Offset, Region
from textual.screen import Screen
from textual.strip import Strip

try:
    from textual._compositor import ChopsUpdate, Compositor
except ImportError:  # pragma: no cover - a Textual without it keeps its own behaviour
    ChopsUpdate = Compositor = None  # type: ignore[assignment,misc]

_EXPECTED = ("chops", "spans", "chop_ends")


def _source(obj: Any) -> str:
    """`inspect.getsource(obj)` ("" where there is none: a frozen install), without keeping
    its module's lines in `linecache` after: Textual's modules are large, and they would stay
    in memory as long as the dashboard runs."""
    try:
        filename = inspect.getsourcefile(obj)
    except TypeError:
        filename = None
    cached = filename is None or filename in linecache.cache
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""
    finally:
        if not cached and filename is not None:
            linecache.cache.pop(filename, None)


def _move_to(x: int, y: int) -> str:
    """`Control.move_to(x, y).segment.text`, without building the Control: one a changed run."""
    return f"\x1b[{y + 1};{x + 1}H"


def render_segments(self: Any, console: Console) -> str:
    """`ChopsUpdate.render_segments`, each line's update starting at its dirty span."""
    sequences: list[str] = []
    append = sequences.append
    move_to = _move_to
    render = Strip.render_style
    color_system = console._color_system or ColorSystem.TRUECOLOR  # as Strip.render does
    chops = self.chops
    chop_ends = self.chop_ends
    last_y = self.spans[-1][0]
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(chop_ends[y], chops[y].items()):
            if strip is None or x > x2 or end <= x1:
                continue
            if x >= x1 and end <= x2:  # the whole chop: its rendering is cached
                append(move_to(x, y))
                append(strip.render(console))
                continue
            # The segments over [x1, x2), cut at cell edges; a segment with characters two
            # cells wide is written whole (its cells beyond the span are current too).
            stop = min(end, x2)
            pos = x
            moved = False
            for text, style, _ in strip:
                width = cell_len(text)
                seg_end = pos + width
                if seg_end <= x1:
                    pos = seg_end
                    continue
                if pos >= stop:
                    break
                if width == len(text):
                    left = max(pos, x1)
                    text = text[left - pos: min(seg_end, stop) - pos]
                else:
                    left = pos
                if not moved:
                    append(move_to(left, y))
                    moved = True
                append(text if style is None else render(style, text, color_system))
                pos = seg_end
        if y != last_y:
            append("\n")
    return "".join(sequences)


# The cells a partial update repaints, by row ([start, end) runs), while
# Compositor.render_partial_update runs; `_renders_on_rows` takes away those it has drawn.
_uncovered: dict[int, list[tuple[int, int]]] | None = None


def _partial_update(self: Any) -> Any:
    """`Compositor.render_partial_update`, noting the cells it repaints for `_renders_on_rows`
    (Textual sends only those: its spans)."""
    global _uncovered
    assert _render_partial_update is not None  # installed only where Textual has it
    _uncovered = _cells_by_row(self._dirty_regions)
    try:
        return _render_partial_update(self)
    finally:
        _uncovered = None


def _cells_by_row(regions: Iterable[Region]) -> dict[int, list[tuple[int, int]]]:
    rows: dict[int, list[tuple[int, int]]] = {}
    for x, y, width, height in regions:
        for row in range(y, y + height):
            rows.setdefault(row, []).append((x, x + width))
    return rows


def _renders_on_rows(self: Any, crop: Region | None = None) -> Iterator[
        tuple[Region, Region, list[Strip]]]:
    """`Compositor._get_renders`: (region, clip, lines) of each visible widget, front to back.
    For a `crop`, only the widgets that show on its rows, each drawn on those rows only (the
    clip given back is cut to them, as `_render_chops` places the lines by it).

    In a partial update, only the widgets that show on a repainted cell that no widget in front
    of them covers, from the first row of those cells to the last: `_render_chops` takes a
    cell's line from the first widget drawn there, so a widget behind (the screen, a container)
    would be drawn for nothing."""
    if crop is None:
        assert _get_renders is not None  # installed only where Textual has it
        yield from _get_renders(self, crop)
        return
    top, bottom = crop.y, crop.bottom
    uncovered = _uncovered
    drawn: list[list[Strip]] = []
    for widget, (region, clip) in self.visible_widgets.items():
        x, y, width, height = region.intersection(clip)
        y1, y2 = max(y, top), min(y + height, bottom)
        if width <= 0 or y2 <= y1:
            continue
        if uncovered is not None:
            right = x + width
            first = last = -1
            for row in range(y1, y2):
                runs = uncovered.get(row)
                if not runs:
                    continue
                left: list[tuple[int, int]] = []  # the cells this widget does not cover
                for start, end in runs:
                    if end <= x or start >= right:
                        left.append((start, end))
                        continue
                    if start < x:
                        left.append((start, x))
                    if end > right:
                        left.append((right, end))
                    if first < 0:
                        first = row
                    last = row
                uncovered[row] = left
            if first < 0:
                continue
            y1, y2 = first, last + 1  # one call: each costs Textual some set-up
        lines = widget.render_lines(Region(x - region.x, y1 - region.y, width, y2 - y1))
        drawn.append(lines)
        yield region, Region(x, y1, width, y2 - y1), lines
    # `_render_chops` has divided every line given to it by now (it asks for the next widget's
    # lines when it is done with the last's).
    if _UNTIE:
        for lines in drawn:
            untie(lines)


def untie(lines: Iterable[Strip]) -> None:
    """Forgets each line's division into one piece (itself).

    `_render_chops` divides each line it draws at the edges of the widgets on its row, and a
    Strip keeps each division it made: a line not cut at all keeps itself (`Strip.divide`
    gives `[self]`). That is a reference cycle, so every line a tick drew, the GPU cards'
    meters, the header, the process rows, outlived the tick until the garbage collector found
    it, with its segments and its seven caches: most of what a collection of the running
    dashboard freed, one every few ticks at some milliseconds each. Forgotten once the lines
    are divided, a line goes as soon as its widget lets it go."""
    for strip in lines:
        cache = strip._divide_cache._cache
        if cache:
            for key, pieces in list(cache.items()):
                if len(pieces) == 1 and pieces[0] is strip:
                    del cache[key]


def _untie_shape() -> bool:
    """Whether a Strip keeps its divisions as `untie` expects."""
    try:
        strip = Strip([], 0)
        return isinstance(strip._divide_cache._cache, dict)
    except AttributeError:  # pragma: no cover - another Textual: its own behaviour
        return False


_UNTIE = _untie_shape()
_get_renders = getattr(Compositor, "_get_renders", None)
_render_partial_update = getattr(Compositor, "render_partial_update", None)


def _compositor_shape() -> bool:
    """Whether Textual's compositor gets its renders as `_renders_on_rows` expects."""
    if _get_renders is None or not hasattr(Compositor, "_render_chops"):
        return False
    try:
        params = list(inspect.signature(_get_renders).parameters)
    except (TypeError, ValueError):
        return False
    source = _source(Compositor._render_chops)
    if params != ["self", "crop"] or "self._get_renders(crop)" not in source \
            or "intersection(region, clip)" not in source \
            or "if not is_rendered_line(y):" not in source:
        return False
    partial = _source(getattr(Compositor, "render_partial_update", None))
    return "self._dirty_regions.copy()" in partial and \
        "self._render_chops(crop, is_rendered_line)" in partial


def install() -> bool:
    """Use `render_segments` for Textual's partial updates, and `_renders_on_rows` for what
    they draw; True when the first is in place (the second is where Textual's shape allows)."""
    if ChopsUpdate is None:
        return False
    if ChopsUpdate.render_segments is render_segments:
        return True
    params = inspect.signature(ChopsUpdate.__init__).parameters
    if not all(name in params for name in _EXPECTED):
        return False
    ChopsUpdate.render_segments = render_segments  # type: ignore[method-assign]
    if _compositor_shape():
        Compositor._get_renders = _renders_on_rows  # type: ignore[method-assign]
        Compositor.render_partial_update = _partial_update  # type: ignore[method-assign]
    return True


def _check_refresh_shape() -> bool:
    try:
        from textual.screen import Screen
        from textual.widget import Widget

        check = _source(Widget._check_refresh)
        refresh = _source(Widget.refresh)
        update = _source(Screen._on_update)
    except (ImportError, AttributeError):  # pragma: no cover
        return False
    return ("if self._repaint_required:" in check and "messages.Update(self)" in check
            and "self.check_idle()" in refresh and "self._dirty_widgets.add(widget)" in update)


_CHECK_REFRESH = _check_refresh_shape()


def _mark_shape() -> bool:
    """Whether a repaint of regions of a widget is what `_mark` takes it for."""
    try:
        from textual.widget import Widget

        refresh = _source(Widget.refresh)
        dirty = _source(Widget._set_dirty)
        update = _source(getattr(Compositor, "update_widgets", None))
    except AttributeError:  # pragma: no cover
        return False
    return ("self._set_dirty(*regions)" in refresh and "self._layout_cache.clear()" in refresh
            and "self._rich_style_cache.clear()" in refresh
            and "self.clear_cached_dimensions()" in refresh
            and "region.translate(content_offset)" in dirty
            and "self._repaint_regions.update(widget_regions)" in dirty
            and "widget._exchange_repaint_regions()" in update)


_MARK = _CHECK_REFRESH and _mark_shape()


def _mark(widget: Any, regions: tuple[Region, ...]) -> None:
    """What `Widget.refresh(*regions)` does that a widget drawn through its frame
    (render.KeepsFrame) needs: the regions to repaint, for the screen. Textual also notes them
    for its own drawing of the content (the widget's dirty regions, its styles cache's dirty
    lines), which such a widget does itself: where Textual draws it again, it draws all of it
    (a refresh of the whole widget, a new size) and the frame is drawn anew."""
    x, y = widget.styles.gutter.top_left
    offset = Offset(x, y)
    widget._repaint_regions.update([region.translate(offset) for region in regions])
    widget._layout_cache.clear()
    widget.clear_cached_dimensions()
    widget._rich_style_cache.clear()


def repaint_now(widget: Any, *regions: Region) -> None:
    """`widget.refresh(*regions)`, its repaint handed to the screen now rather than on the
    widget's next idle: what Textual does then (`Widget._check_refresh`, which posts an Update
    that the screen takes as `Screen._on_update`), without the wake-up and the message. The
    widget is a `RepaintsNow`. Every widget that changes in a tick handing its repaint over
    while the tick is applied, the screen draws them together, once."""
    if not _CHECK_REFRESH:
        widget.refresh(*regions)
        return
    if (_MARK and regions and getattr(widget, "_frame", None) is not None
            and widget.is_mounted and widget._parent is not None and not widget._closing
            and not (widget._refresh_styles_required or widget._scroll_required
                     or widget._layout_required)):
        _mark(widget, regions)
        _hand_over(widget)
        return
    widget._repainting_now = True
    try:
        widget.refresh(*regions)
    finally:
        widget._repainting_now = False
    if (widget._refresh_styles_required or widget._scroll_required or widget._layout_required
            or not widget.is_mounted or widget._parent is None or widget._closing):
        widget._check_refresh()  # more than a repaint: as Textual does it
        return
    if widget._repaint_required:
        widget._repaint_required = False
        _hand_over(widget)


def _hand_over(widget: Any) -> None:
    """The widget's repaint to its screen, now (`Screen._on_update`)."""
    if widget.display:
        screen = widget.screen
        if screen in screen._compositor:
            screen._dirty_widgets.add(widget)
            screen.check_idle()


class RepaintsNow:
    """A widget mix-in for `repaint_now`: a refresh made through it does not also prompt the
    widget's own idle. It also answers two questions that every repaint asks of the widget
    (where its content starts, which screen it is on) as Textual does, more cheaply."""

    _repainting_now = False

    @property
    def content_offset(self) -> Offset:
        """Textual's: the top left of the border and the padding. Textual adds the scroll
        bars' room first, which is never above or left of the content, and works out whether
        there are scroll bars to do it."""
        x, y = self.styles.gutter.top_left  # type: ignore[attr-defined]
        return Offset(x, y)

    @property
    def screen(self) -> Screen[object]:
        """Textual's: the first screen among the widget's parents, without importing the
        screen's module on every call."""
        node: Any = self
        while node is not None and not isinstance(node, Screen):
            node = node._parent
        if node is None:
            raise NoScreen("node has no screen")
        return node

    def check_idle(self) -> None:
        if not self._repainting_now:
            super().check_idle()  # type: ignore[misc]


def installed() -> bool:
    """Whether a repaint starts at its first dirty cell. Where it does not, each separate run
    of changed cells on a line would resend the line from its start: widgets then repaint
    one run from the first change to the last."""
    return ChopsUpdate is not None and ChopsUpdate.render_segments is render_segments


# ----------------------------------------------------------------------------------------------
# An input thread that sleeps until there is input.
#
# Textual's LinuxDriver reads the terminal in a thread that wakes every 0.1 s whether a key came
# or not (to time out an escape sequence, and to notice the app stopping): ten wake-ups a
# second, each taking the interpreter's lock from the thread that draws, for as long as the
# dashboard runs. `quiet_linux_driver` gives a LinuxDriver whose thread waits for input with no
# timeout, except while an escape sequence is pending (then it waits as Textual does), and that
# stopping wakes through a pipe. The loop is Textual's own otherwise.

_quiet: dict[type, type] = {}


def quiet_linux_driver(base: type) -> type | None:
    """`base` (Textual's LinuxDriver) with an input thread that sleeps until there is input;
    None where the driver or its parser no longer has the shape this was written for."""
    if base in _quiet:
        return _quiet[base]
    try:
        from textual._loop import loop_last
        from textual._xterm_parser import XTermParser
        from textual.drivers.linux_driver import LinuxDriver
    except ImportError:  # pragma: no cover
        return None
    if not issubclass(base, LinuxDriver) or base.run_input_thread is not \
            LinuxDriver.run_input_thread:
        return None
    parser = XTermParser(False)
    if not hasattr(parser, "_timeout_time") or not callable(getattr(parser, "tick", None)):
        return None
    if "exit_event" not in _source(LinuxDriver.disable_input):  # "": a frozen install
        return None

    class QuietLinuxDriver(base):  # type: ignore[misc]
        _wake: tuple[int, int] | None = None

        def run_input_thread(self) -> None:
            fileno = self.fileno
            selector = selectors.SelectSelector()
            selector.register(fileno, selectors.EVENT_READ)
            # Without the pipe (started some other way) it wakes as often as Textual's.
            idle: float | None = 0.1
            if self._wake is not None:
                selector.register(self._wake[0], selectors.EVENT_READ)
                idle = None
            parser = XTermParser(self._debug)
            decode = getincrementaldecoder("utf-8")().decode

            def process(events: list[tuple[Any, int]], final: bool = False) -> None:
                ready = [e for e in events if e[0].fd == fileno]
                for last, (_key, mask) in loop_last(ready):
                    if mask & selectors.EVENT_READ:
                        data = decode(os.read(fileno, 1024 * 4), final=final and last)
                        if not data:
                            break
                        for event in parser.feed(data):
                            self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)

            try:
                while not self.exit_event.is_set():
                    # Input, a pending escape sequence's time running out, or the end.
                    process(selector.select(idle if parser._timeout_time is None else 0.1))
                selector.unregister(fileno)
                process(selector.select(0.1), final=True)
            finally:
                selector.close()
                try:
                    for _ in parser.feed(""):
                        pass
                except Exception:
                    pass

        def start_application_mode(self) -> None:
            self._wake = os.pipe()  # before Textual starts the input thread
            super().start_application_mode()

        def disable_input(self) -> None:
            wake = self._wake
            if wake is not None:
                # Left unread: the thread returns from select until it sees exit_event, which
                # Textual sets before it waits for the thread to end.
                os.write(wake[1], b"\0")
            super().disable_input()
            if wake is not None:
                self._wake = None
                os.close(wake[0])
                os.close(wake[1])

    _quiet[base] = QuietLinuxDriver
    return QuietLinuxDriver
