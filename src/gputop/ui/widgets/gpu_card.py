"""One GPU as a card: meters with fixed-scale history, temperatures, clocks, link, fan, badges.

    ╭ 0  H100 80GB HBM3 ─────────────────────── PWR CAP ╮
    │ GPU ▕█████████████▌  ▏ 87% SM 72%  ▂▃▅▇████▇▆▅▆▇██ │
    │ MEM ▕███████████▒    ▏ 61.2/79.6G  ▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃ │
    │ PWR ▕██████████████  ▏ 612/700W    ▅▆▇▇▇▇▇▇▇▇▇▇▇▇▇ │
    │ TEMP 71°C  16°C to slowdown  HBM 63°C  FAN n/s     │
    │ CLK 1395/1980 MEM 2619/2619 MHz  PCIe 5x16         │
    ╰────────────────────────────────────────────────────╯

Where the GPU's processes run the in-process probe, the MEM bar shows where the memory goes and
the bottom border names the parts (ui/memory.py):

    │ MEM ▕████████▓▓▓░▒ ▏ 68.8/79.6G  ▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃ │
    ╰ █ alloc 47.3  ▓ cache 19.6  ░ ctx+nccl 2.0 GiB ───╯

Drawn line by line (no child widgets); a tick repaints only the lines that changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import attrgetter, is_
from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.events import Click
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from gputop.model import DeviceSample, Missing, value
from gputop.model.memory_split import MemorySplit
from gputop.ui import bars, memory, textual_private
from gputop.ui.render import (
    KeepsFrame,
    Runs,
    add_run,
    border_label_spans,
    changed_runs,
    changed_spans,
    content_strip,
    part_runs,
    parts_segments,
    parts_strip,
)
from gputop.ui.text import safe_content
from gputop.ui.view import format as fmt
from gputop.ui.view import styles
from gputop.ui.view.history import GpuHistory
from gputop.ui.view.status import (
    CROSS,
    Badge,
    badges,
    fraction,
    pcie_downtrained,
    thresholds,
)
from gputop.ui.widgets.gpu_row import temp_style
from gputop.ui.widgets.history_graph import GAP, gap_runs, graph_line
from gputop.ui.widgets.text_line import same

if TYPE_CHECKING:
    from typing_extensions import Self

BAR_WIDTH = 14
METER_WIDTH = 33  # "GPU " + framed bar + " 100%" + " SM 100%"
CARD_HEIGHT = 7
HISTORIES = ("util", "mem", "power")  # GpuHistory attributes of the first three lines


def _muted_if_missing(v: object) -> str:
    return styles.MUTED if isinstance(v, Missing) else ""


# A GPU's lines as (text, style) parts: compared and drawn every tick without building a
# Content (render.parts_strip); the *_line functions give them as Content.
Parts = tuple[bars.Part, ...]


def util_parts(d: DeviceSample) -> Parts:
    util = value(d.util_gpu)
    frac = None if util is None else util / 100.0
    sm = d.sm_active
    sm_parts: Parts = ()
    # SM active exists only where GPM does (Hopper and newer); elsewhere it is left out rather
    # than shown as "n/s" on every card.
    if not (isinstance(sm, Missing) and sm.reason == "unsupported"):
        sm_parts = ((" SM", styles.LABEL),
                    (f"{fmt.label(sm, fmt.percent):>5}", _muted_if_missing(sm)))
    return (
        ("GPU ", styles.LABEL),
        *bars.meter_parts(frac, BAR_WIDTH, styles.UTIL),
        (f"{fmt.label(d.util_gpu, fmt.percent):>5}", _muted_if_missing(d.util_gpu)),
        *sm_parts,
    )


def memory_parts(d: DeviceSample, split: MemorySplit | None = None) -> Parts:
    used, total = value(d.mem_used), value(d.mem_total)
    if used is not None and total is not None:
        text, style = f" {fmt.gib(used)}/{fmt.gib(total)}G", ""
    else:
        text, style = f" {fmt.label(d.mem_used)}", styles.MUTED
    return (("MEM ", styles.LABEL), *memory.bar_parts(d, BAR_WIDTH, split), (text, style))


def power_parts(d: DeviceSample) -> Parts:
    draw, limit = value(d.power_draw), value(d.power_limit)
    frac = fraction(d.power_draw, d.power_limit)
    if draw is not None and limit is not None:
        text, style = f" {draw:.0f}/{limit:.0f}W", ""
    else:
        text, style = f" {fmt.label(d.power_draw, fmt.watts)}", _muted_if_missing(d.power_draw)
    return (("PWR ", styles.LABEL), *bars.meter_parts(frac, BAR_WIDTH, styles.POWER),
            (text, style))


def util_line(d: DeviceSample) -> Content:
    return Content.assemble(*util_parts(d))


def memory_line(d: DeviceSample, split: MemorySplit | None = None) -> Content:
    """Used of total memory; with a probe's split, the bar shows its four parts (the card's
    bottom border names them)."""
    return Content.assemble(*memory_parts(d, split))


def power_line(d: DeviceSample) -> Content:
    return Content.assemble(*power_parts(d))


# A card line: a GPU's lines as parts, a lost GPU's as Content.
Line = Content | Parts


def _same_line(a: Line, b: Line) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    return same(a, b)


def thermal_parts(d: DeviceSample) -> Parts:
    hot = temp_style(d)
    parts: list[bars.Part] = [
        ("TEMP ", styles.LABEL),
        (fmt.label(d.temp_gpu, fmt.celsius), hot or _muted_if_missing(d.temp_gpu)),
    ]
    margin = value(d.temp_margin)
    if margin is not None:
        glyph = "▲ " if margin <= 10 else ""
        words = f"{margin:.0f}°C to slowdown" if margin > 0 else "at slowdown temp"
        parts += [("  ", ""), (f"{glyph}{words}", hot or styles.LABEL)]
    if not isinstance(d.temp_mem, Missing) or d.temp_mem.reason != "unsupported":
        parts += [("  HBM ", styles.LABEL),
                  (fmt.label(d.temp_mem, fmt.celsius), _muted_if_missing(d.temp_mem))]
    parts += [("  FAN ", styles.LABEL), (fmt.label(d.fan, fmt.percent), _muted_if_missing(d.fan))]
    return tuple(parts)


def clocks_parts(d: DeviceSample) -> Parts:
    def pair(cur: object, top: object) -> bars.Part:
        return f"{fmt.label(cur, fmt.mhz)}/{fmt.label(top, fmt.mhz)}", _muted_if_missing(cur)

    gen, width = value(d.pcie_gen), value(d.pcie_width)
    link: Parts
    if gen is not None and width is not None:
        if pcie_downtrained(d):
            link = ((f"▼ {gen}x{width}", styles.text_style("warning")),
                    (f" of {value(d.pcie_gen_max)}x{value(d.pcie_width_max)}", styles.LABEL))
        else:
            link = ((f"{gen}x{width}", ""),)
    else:
        link = ((fmt.label(d.pcie_gen), styles.MUTED),)
    return (
        ("CLK ", styles.LABEL), pair(d.clock_sm, d.clock_sm_max),
        (" MEM ", styles.LABEL), pair(d.clock_mem, d.clock_mem_max), (" MHz", styles.LABEL),
        ("  PCIe ", styles.LABEL), *link,
    )


def thermal_line(d: DeviceSample) -> Content:
    return Content.assemble(*thermal_parts(d))


def clocks_line(d: DeviceSample) -> Content:
    return Content.assemble(*clocks_parts(d))


_CLOCK_INPUTS = attrgetter("clock_sm", "clock_sm_max", "clock_mem", "clock_mem_max", "pcie_gen",
                           "pcie_width", "pcie_gen_max", "pcie_width_max")

# A GPU's lines, each with what it is drawn from. A value that held still is last tick's very
# object (the poller keeps it), so a line whose inputs are all the same objects as when it was
# built is that line again, and is not built.
GPU_LINES: tuple[tuple[Callable[[DeviceSample, MemorySplit | None], Parts],
                       Callable[[DeviceSample, MemorySplit | None], tuple[object, ...]]], ...] = (
    (lambda d, split: util_parts(d), lambda d, split: (d.util_gpu, d.sm_active)),
    (memory_parts, lambda d, split: (d.mem_used, d.mem_total, d.mem_reserved, split,
                                     thresholds())),
    (lambda d, split: power_parts(d), lambda d, split: (d.power_draw, d.power_limit)),
    (lambda d, split: thermal_parts(d),
     lambda d, split: (d.temp_gpu, d.temp_margin, d.temp_mem, d.fan)),
    (lambda d, split: clocks_parts(d),
     lambda d, split: (*_CLOCK_INPUTS(d), pcie_downtrained(d))),
)


def title(d: DeviceSample, width: int, found: list[Badge] | None = None) -> Content:
    """Index, name and badges, the name cut so the badges always fit."""
    chips = Content(" ").join(
        Content(f" {b.text} ").stylize(styles.badge_style(b.severity))
        for b in (badges(d) if found is None else found)
    )
    room = max(4, width - 8 - chips.cell_length - (1 if chips else 0))
    name = safe_content(fmt.short_gpu_name(d.name)).truncate(room, ellipsis=True)
    head = Content.assemble((f"{d.index}", "bold"), "  ", name)
    return Content.assemble(head, " ", chips) if chips else head


class GpuCard(KeepsFrame, textual_private.RepaintsNow, Widget):
    """A GPU as a card, drawn line by line. A tick repaints only the cells that changed, never
    the whole card. Click selects it; a second click opens the detail view."""

    DEFAULT_CSS = """
    GpuCard {
        height: 7;
        border: round $foreground 30%;
        border-title-color: $foreground;
        border-title-align: left;
        border-subtitle-align: left;
        border-subtitle-color: $foreground;
        padding: 0 1;
    }
    GpuCard.-warning { border: round $warning; }
    GpuCard.-critical { border: round $error; }
    /* History a shade darker than the meters, so the two read apart (solid colours: a
       component style cannot blend alpha). */
    GpuCard > .gpu-card--util-history { color: $primary; }
    GpuCard > .gpu-card--memory-history { color: $success; }
    GpuCard > .gpu-card--power-history { color: $secondary-lighten-1; }
    GpuCard > .gpu-card--gap { color: $foreground-muted; }
    """
    COMPONENT_CLASSES = {
        "gpu-card--util-history",
        "gpu-card--memory-history",
        "gpu-card--power-history",
        "gpu-card--gap",
    }
    HISTORY_CLASSES = ("gpu-card--util-history", "gpu-card--memory-history",
                       "gpu-card--power-history")
    _border_regions: list[Region] | None = None  # while a border label changes

    class Clicked(Message):
        def __init__(self, index: int, chain: int) -> None:
            super().__init__()
            self.index = index
            self.chain = chain

    def __init__(self, index: int, history: GpuHistory, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index = index
        self.history = history
        self._sample: DeviceSample | None = None
        self._lines: list[Line] = [Content("")] * (CARD_HEIGHT - 2)
        self._inputs: list[tuple[object, ...]] = [()] * len(GPU_LINES)  # see GPU_LINES
        self._scales = (100.0, 1.0, 1.0)  # fixed: 0-100 %, 0-total memory, 0-power limit
        self._graphs: list[str] = [""] * len(HISTORIES)
        self._graph_state: list[tuple[int, int, float, str] | None] = [None] * len(HISTORIES)
        self._badges: list[Badge] = []
        self._title_key: object = None
        self._split: MemorySplit | None = None
        self._legend: Content | None = None
        self._title: Content | None = None
        self._strips: dict[int, Strip] = {}  # rendered lines, dropped when they change
        self._parts: dict[int, tuple[Line, list[Segment], str, list[Segment]]] = {}  # _make_strip
        self._runs: dict[int, tuple[Parts, Runs | None]] = {}  # _meter_runs
        self._style_cache: list[tuple[RichStyle, RichStyle]] = []
        self._title = self.border_title = Content(f"{index}")

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style_cache = []
        self._strips.clear()
        self._parts.clear()
        # Redrawn now, so that the next tick finds what is on screen and repaints the cells
        # that change, not whole lines (style updates are rare: mount, theme, selection).
        self.refresh()

    def update(self, d: DeviceSample, slow: bool = True,
               split: MemorySplit | None = None) -> None:
        """Show a new sample (the app pushed the history already) and, where the GPU's
        processes run the probe, its memory split; repaint the lines whose text or graph
        changed. A flat history scrolls without changing, so it costs nothing.

        The temperature and clock lines change by a degree or a few MHz nearly every tick;
        they are repainted on the `slow` ticks only (and at once when a badge changes), which
        halves what a tick writes to the terminal."""
        total = float(value(d.mem_total, 0) or self._scales[1])
        limit = float(value(d.power_limit, 0) or self._scales[2])
        self._scales = (100.0, total, limit)
        width = self._width()
        # A sample that held still is the very same object (the poller keeps it); comparing
        # two samples field by field costs more than building the lines again.
        if d is not self._sample or split != self._split:
            was_lost = self._sample is None or self._sample.lost is not None
            self._sample = d
            self._split = split
            found = badges(d)
            if found != self._badges:
                slow = True
                self._badges = found
                worst = found[0].severity if found else None
                self.set_class(worst == "warning", "-warning")
                self.set_class(worst == "critical", "-critical")
            self._set_title(width)
            self._set_legend(width)
            if d.lost is not None:
                lines = self._lost_lines(d)
            else:  # the temperature and clock lines wait for a slow tick
                lines = self._gpu_lines(d, len(GPU_LINES) if slow or was_lost else 3)
        else:
            lines = list(self._lines)
        graphs = [self._graph(y, width) for y in range(len(HISTORIES))]
        changed = []
        for y, line in enumerate(lines):
            graph_changed = y < len(graphs) and graphs[y] != self._graphs[y]
            if graph_changed or not _same_line(line, self._lines[y]):
                changed.append(y)
        self._lines = lines
        self._graphs = graphs
        regions: list[Region] = []
        for y in changed:
            regions += self._changed_cells(y, width)
        if regions:  # one call a tick: each one costs Textual some bookkeeping
            textual_private.repaint_now(self, *regions)

    def _width(self) -> int:
        """The content's width. `Widget.size` finds the widget on its screen each time: this
        is called for every line of every card on every tick."""
        return max(0, self.outer_size.width - self.styles.gutter.width)

    def _changed_cells(self, y: int, width: int) -> list[Region]:
        """Draw line `y` now; the cells that differ from the screen."""
        old = self._strips.get(y)
        if not self.is_mounted or not width or old is None:
            self._strips.pop(y, None)
            return [Region(0, y, max(1, width), 1)]
        was = self._parts.get(y)
        new = self._strips[y] = self._make_strip(y, width)
        now = self._parts.get(y)
        if (y >= len(HISTORIES) or width <= METER_WIDTH + 2 or was is None or now is None
                or old.cell_length != width or len(was[2]) != len(now[2])):
            return [Region(x1, y, x2 - x1, 1) for x1, x2 in changed_spans(old, new)]
        # A meter and its graph, each compared with the part it replaces (the line on screen
        # is made of `was`): cheaper than comparing the whole line. A meter drawn from parts is
        # compared by its parts.
        spans: list[tuple[int, int]] = []
        if was[1] is not now[1]:
            found = None
            if isinstance(was[0], tuple) and isinstance(now[0], tuple):
                old_runs, new_runs = self._meter_runs(y, was[0]), self._meter_runs(y, now[0])
                if old_runs is not None and new_runs is not None:
                    found = changed_runs(old_runs, new_runs, METER_WIDTH + 1)
            spans = found if found is not None else changed_spans(
                Strip(was[1], METER_WIDTH + 1), Strip(now[1], METER_WIDTH + 1))
        if was[2] != now[2]:
            first, last = _differ(was[2], now[2])
            start = METER_WIDTH + 1
            add_run(spans, start + first, start + last + 1)
        return [Region(x1, y, x2 - x1, 1) for x1, x2 in spans]

    def _meter_runs(self, y: int, parts: Parts) -> Runs | None:
        """`render.part_runs` of the meter of line `y`: the meter on screen was the new one
        of the last comparison, and is not cut into runs again."""
        kept = self._runs.get(y)
        if kept is not None and kept[0] is parts:
            return kept[1]
        runs = part_runs(parts, METER_WIDTH + 1)
        self._runs[y] = (parts, runs)
        return runs

    def _graph(self, y: int, width: int) -> str:
        """History line `y` as text. One new value per tick: shift the last text by one cell
        instead of drawing the whole line again, unless the width or the scale changed."""
        cells = max(0, width - METER_WIDTH - 1)
        values: deque[float | None] = getattr(self.history, HISTORIES[y])
        ticks, scale = self.history.ticks, self._scales[y]
        last = self._graph_state[y]
        if last is not None and last[1:3] == (cells, scale):
            if last[0] == ticks:
                return last[3]
            if last[0] == ticks - 1 and values:
                text = last[3][1:] + graph_line([values[-1]], 0, 1, 1, scale)
                self._graph_state[y] = (ticks, cells, scale, text)
                return text
        text = graph_line(list(values)[-cells:] if cells else [], 0, cells, 1, scale)
        self._graph_state[y] = (ticks, cells, scale, text)
        return text

    def _gpu_lines(self, d: DeviceSample, count: int) -> list[Line]:
        """The card's lines with the first `count` of the GPU's lines of `d`, each built again
        only where what it is drawn from changed (GPU_LINES)."""
        lines = list(self._lines)
        for y in range(count):
            make, inputs = GPU_LINES[y]
            now, was = inputs(d, self._split), self._inputs[y]
            if isinstance(lines[y], tuple) and len(now) == len(was) and all(map(is_, now, was)):
                continue
            lines[y] = make(d, self._split)
            self._inputs[y] = now
        return lines

    def _lost_lines(self, d: DeviceSample) -> list[Line]:
        assert d.lost is not None
        since = f" since {fmt.clock_time(d.lost.since)}" if d.lost.since else ""
        return [
            Content.assemble((f" {CROSS} LOST ", styles.badge_style("critical"))),
            Content(""),
            Content(""),
            Content(f"the GPU fell off the bus{since}").stylize(styles.text_style("critical")),
            Content("reset the GPU or reboot the node").stylize(styles.LABEL),
        ]

    def render_line(self, y: int) -> Strip:
        return self._content_line(y, self._width())

    def _content_line(self, y: int, width: int) -> Strip:
        cached = self._strips.get(y)
        if cached is not None and cached.cell_length == width:
            return cached
        strip = self._strips[y] = self._make_strip(y, width)
        return strip

    def _line_strip(self, line: Line, width: int) -> Strip:
        if isinstance(line, tuple):
            return parts_strip(self, line, width)
        return content_strip(self, line, width)

    def _line_segments(self, line: Line, width: int) -> list[Segment]:
        if isinstance(line, tuple):
            return parts_segments(self, line, width)
        return list(content_strip(self, line, width))

    def _make_strip(self, y: int, width: int) -> Strip:
        if y >= len(self._lines):
            return Strip.blank(width, self.visual_style.rich_style)
        if y >= len(HISTORIES) or width <= METER_WIDTH + 2:
            return self._line_strip(self._lines[y], width)
        # A line is repainted when its meter or its graph changed, mostly not both: the part
        # that did not change is reused. The two are kept as segments, made one Strip here.
        line, text = self._lines[y], self._graph(y, width)
        last = self._parts.get(y)
        if last is not None and _same_line(last[0], line):
            meter = last[1]
        else:
            meter = self._line_segments(line, METER_WIDTH + 1)
        if last is not None and last[2] == text:
            graph = last[3]
        else:
            bar, gap = self._history_styles()[y]
            graph = [Segment(run, gap if run[0] == GAP else bar) for run in gap_runs(text)]
        self._parts[y] = (line, meter, text, graph)
        return Strip([*meter, *graph], width)

    def _history_styles(self) -> list[tuple[RichStyle, RichStyle]]:
        # Looking a component style up walks the DOM: done once per style change (which
        # empties the cache), not per line.
        if not self._style_cache:
            base = self.visual_style.rich_style
            try:
                gap = base + self.get_component_rich_style("gpu-card--gap", partial=True)
                self._style_cache = [
                    (base + self.get_component_rich_style(name, partial=True), gap)
                    for name in self.HISTORY_CLASSES
                ]
            except KeyError:  # no styles (a card being removed, drawn before the layout
                return [(base, base)] * len(HISTORIES)  # that takes it off the screen)
        return self._style_cache

    def select(self, selected: bool) -> None:
        self.set_class(selected, "-selected")

    def _set_title(self, width: int) -> None:
        if self._sample is None:
            return
        width = width or 60
        key = (self._sample.index, self._sample.name, tuple(self._badges), width)
        if key != self._title_key:
            self._title_key = key
            new = title(self._sample, width, self._badges)
            with self._repainting_border(-1, self._title, new):
                self._title = self.border_title = new

    def _set_legend(self, width: int) -> None:
        """The split's parts in words on the bottom border, or nothing without a split."""
        split = self._split if self._sample is not None and self._sample.lost is None else None
        legend = (None if split is None else memory.legend(split, max(8, (width or 60) - 4)))
        if not same(legend, self._legend):
            with self._repainting_border(CARD_HEIGHT - 2, self._legend, legend):
                self._legend = self.border_subtitle = legend

    @contextmanager
    def _repainting_border(self, y: int, old: Content | None,
                           new: Content | None) -> Iterator[None]:
        """Textual repaints the whole card when a border label changes. A badge that comes and
        goes (PWR CAP under a sawtooth load) or a memory split that moves changes a few cells
        of one border line (`y` in content rows: -1 is the top border): only those are
        repainted."""
        width = self.outer_size.width
        if self.is_mounted and width:
            left = self.content_offset.x  # border and padding
            self._border_regions = [Region(x1 - left, y, x2 - x1, 1)
                                    for x1, x2 in border_label_spans(old, new, width)]
            if self._frame is not None and self._border_regions:
                self._frame.stale.add(y + self.content_offset.y)
        try:
            yield
        finally:
            self._border_regions = None

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        if self._border_regions is not None and not regions and not layout and not recompose:
            if not self._border_regions:
                return self
            regions = tuple(self._border_regions)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def on_resize(self) -> None:
        # The lines drawn at the new size are kept (a strip of another width is drawn again):
        # Textual painted them before this event arrived, and will not paint them again.
        width = self._width()
        self._graphs = [self._graph(y, width) for y in range(len(HISTORIES))]
        self._set_title(width)
        self._set_legend(width)

    def on_click(self, event: Click) -> None:
        self.post_message(self.Clicked(self.index, event.chain))


def _differ(old: str, new: str) -> tuple[int, int]:
    """The first and last index where two texts of the same length differ (one graph line:
    a character's style follows from the character)."""
    first, last = 0, len(new) - 1
    while old[first] == new[first]:
        first += 1
    while old[last] == new[last]:
        last -= 1
    return first, last
