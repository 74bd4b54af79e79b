"""A fixed-scale history graph drawn line by line.

Textual's Sparkline scales to the min..max of its data, so 3 % of jitter fills the whole height.
Here 0-100 % stays 0-100 % (memory 0-total, power 0-limit): a flat line near the bottom means an
idle GPU. The newest value is at the right edge; a tick with no value is a gap."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from rich.segment import Segment
from textual.strip import Strip
from textual.widget import Widget

BLOCKS = " ▁▂▃▄▅▆▇█"
GAP = "·"  # a tick without a value: distinct from a zero, which is blank


class HistoryGraph(Widget):
    """Bars of the last `width` values of a deque, scaled to 0..`maximum`, `height` rows high."""

    DEFAULT_CSS = """
    HistoryGraph {
        height: 1;
        min-width: 4;
        color: $primary;
    }
    HistoryGraph > .history-graph--gap {
        color: $foreground-muted;
    }
    """
    COMPONENT_CLASSES = {"history-graph--gap"}

    def __init__(self, values: deque[float | None] | None = None, *, maximum: float = 100.0,
                 maxlen: int = 600, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        # The deque may be shared with the app's history store: the graph only reads it.
        self.values: deque[float | None] = values if values is not None else deque(maxlen=maxlen)
        self._maximum = maximum

    @property
    def maximum(self) -> float:
        return self._maximum

    @maximum.setter
    def maximum(self, value: float) -> None:
        if value != self._maximum:
            self._maximum = value
            self.refresh()

    def add_value(self, v: float | None) -> None:
        self.values.append(v)
        self.refresh()

    def line_text(self, y: int, width: int, height: int = 1) -> str:
        """Row `y` (0 is the top) of the graph as plain text; the widget paints it."""
        return graph_line(list(self.values)[-width:] if width else [], y, width, height,
                          self._maximum)

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        text = self.line_text(y, width, height)
        style = self.rich_style
        gap_style = style + self.get_component_rich_style("history-graph--gap", partial=True)
        return Strip([Segment(run, gap_style if run[0] == GAP else style)
                      for run in gap_runs(text)], width)


def gap_runs(text: str) -> list[str]:
    """`text` cut where it switches between graph cells and gap dots: a line is a handful of
    segments, not one per cell."""
    if GAP not in text:  # the common case: every tick had a value
        return [text] if text else []
    runs: list[str] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or (text[i] == GAP) != (text[start] == GAP):
            runs.append(text[start:i])
            start = i
    return runs


def graph_line(values: Sequence[float | None], y: int, width: int, height: int,
               maximum: float) -> str:
    """Row `y` of a bar graph of `values` (right-aligned, newest last) in eighth blocks."""
    if width <= 0:
        return ""
    levels = max(1, height) * 8
    floor_ = (height - 1 - y) * 8  # eighths below this row
    cells: list[str] = []
    for v in values:
        if v is None:
            cells.append(GAP if y == height - 1 else " ")
            continue
        n = 0 if maximum <= 0 else math.ceil(min(1.0, max(0.0, v / maximum)) * levels - 1e-9)
        cells.append(BLOCKS[max(0, min(8, n - floor_))])
    return " " * (width - len(cells)) + "".join(cells)
