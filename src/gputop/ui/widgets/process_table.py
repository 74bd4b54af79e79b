"""The process table, drawn line by line.

Textual's DataTable repaints every visible row, each cell through Rich, when one cell changes;
here a refresh repaints only the cells whose text changed, and a row is one strip of pre-measured
cells. The header stays on the first line while rows scroll. Sorting and filtering happen before (in
process_rows); a process's DataLoader workers follow it, and the cursor stays on the same process
when rows move. Below 100 columns the JOB and RSS columns give their room to the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.binding import Binding
from textual.events import Click, Resize
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputop.ui import textual_private
from gputop.ui.render import KeepsFrame, changed_spans
from gputop.ui.text import sanitize
from gputop.ui.view.process_rows import COLUMN_KEYS, COLUMNS, Row

if TYPE_CHECKING:
    pass

NARROW_WIDTH = 100
NARROW_HIDES = ("job", "rss")
JOB_WIDTH = 20
_COLUMN = {c.key: c for c in COLUMNS}
_INDEX = {k: i for i, k in enumerate(COLUMN_KEYS)}  # a column's place in Row.cells


def fit(text: str, width: int, right: bool = False) -> str:
    """`text` in exactly `width` cells: cut with an ellipsis, padded on the left or right."""
    if width <= 0:
        return ""
    length = cell_len(text)
    if length > width:
        return set_cell_size(text, width - 1) + "…"
    pad = " " * (width - length)
    return pad + text if right else text + pad


class ProcessTable(KeepsFrame, textual_private.RepaintsNow, ScrollView, can_focus=True):
    DEFAULT_CSS = """
    ProcessTable {
        height: 1fr;
        min-height: 3;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
    }
    ProcessTable > .process-table--header {
        text-style: bold;
        background: $panel;
    }
    /* Solid colours: component styles are turned into Rich styles, which cannot blend alpha. */
    ProcessTable > .process-table--cursor {
        background: $panel;
    }
    ProcessTable:focus > .process-table--cursor {
        background: $primary;
        color: $text;
        text-style: bold;
    }
    ProcessTable > .process-table--muted {
        color: $foreground-muted;
    }
    """
    COMPONENT_CLASSES = {"process-table--header", "process-table--cursor",
                         "process-table--muted"}
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
        Binding("enter", "select", "Workers", show=False),
    ]

    class Selected(Message):
        """Enter or a double click on a row."""

        def __init__(self, row: Row) -> None:
            super().__init__()
            self.row = row

    class HeaderClicked(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[Row] = []
        self.cursor = 0
        self._cells: list[tuple[str, ...]] = []  # sanitized, visible columns only
        self._visible: tuple[str, ...] = COLUMN_KEYS
        self._widths: dict[str, int] = {}
        self._sort: tuple[str, bool] = ("gpu", False)
        self._strips: dict[int, Strip] = {}  # by row index; dropped when the row changes
        self._header: Strip | None = None
        self._palette_focus: bool | None = None
        self._palette: dict[str, RichStyle] = {}

    # -- data -----------------------------------------------------------------------------------

    @property
    def selected_row(self) -> Row | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def show(self, rows: Sequence[Row]) -> None:
        """Show `rows`; repaint only the lines whose row or text changed."""
        selected = self.selected_row
        old_keys = [r.key for r in self.rows]
        old_cells = self._cells
        self.rows = list(rows)
        self._cells = [self._visible_cells(r) for r in self.rows]
        if selected is not None:
            keys = [r.key for r in self.rows]
            if selected.key in keys:
                self.cursor = keys.index(selected.key)
            elif selected.proc.key in keys:  # a worker that went away: back to its process
                self.cursor = keys.index(selected.proc.key)
        self.cursor = max(0, min(self.cursor, len(self.rows) - 1))
        if self._update_widths() or len(self.rows) != len(old_keys):
            self._strips.clear()
            self.virtual_size = Size(self.size.width, len(self.rows) + 1)
            self.refresh()
        else:
            regions: list[Region] = []
            top, height = int(self.scroll_y), self.size.height
            for i, r in enumerate(self.rows):
                if r.key != old_keys[i] or self._cells[i] != old_cells[i]:
                    regions += self._changed_cells(i, top, height)
            if regions:
                textual_private.repaint_now(self, *regions)
        self._scroll_to_cursor()

    def set_sort(self, column: str, reverse: bool) -> None:
        """Mark the sort column in the header (the rows come sorted from `show`)."""
        self._sort = (column, reverse)
        self._header = None
        self.refresh(Region(0, 0, self.size.width, 1))

    def _visible_cells(self, r: Row) -> tuple[str, ...]:
        cells = r.cells
        return tuple(sanitize(cells[_INDEX[k]], 400) for k in self._visible)

    def _update_widths(self) -> bool:
        """Column widths for the current width and rows; True when they changed."""
        widths: dict[str, int] = {}
        for k in self._visible:
            col = _COLUMN[k]
            if k == "job":
                jobs = [cell_len(c[self._visible.index("job")]) for c in self._cells]
                widths[k] = min(JOB_WIDTH, max([len(col.label), *jobs]))
            elif col.width is not None:
                widths[k] = col.width
        fixed = sum(w + 1 for w in widths.values())
        widths["cmd"] = max(8, self.scrollable_content_region.width - fixed - 1)
        if widths != self._widths:
            self._widths = widths
            self._header = None
            return True
        return False

    # -- drawing --------------------------------------------------------------------------------

    def _styles(self) -> dict[str, RichStyle]:
        # Component styles walk the DOM: looked up once per style or focus change (a style
        # change empties the palette), not per line.
        if not self._palette or self._palette_focus != self.has_focus:
            base = self.visual_style.rich_style
            cursor = base + self.get_component_rich_style("process-table--cursor", partial=True)
            muted = self.get_component_rich_style("process-table--muted", partial=True)
            self._palette = {
                "base": base,
                "header": base + self.get_component_rich_style("process-table--header",
                                                               partial=True),
                "cursor": cursor,
                "muted": base + muted,
                "cursor-muted": cursor + muted,
            }
            self._palette_focus = self.has_focus
            self._strips.clear()
            self._header = None
        return self._palette

    def _row_strip(self, i: int, width: int) -> Strip:
        palette = self._styles()
        row, cells = self.rows[i], self._cells[i]
        on_cursor = i == self.cursor
        plain = palette["cursor" if on_cursor else "base"]
        dim = palette["cursor-muted" if on_cursor else "muted"]
        segments = []
        for k, text in zip(self._visible, cells):
            style = dim if (k in row.dim or (row.child is not None and k == "cmd")) else plain
            segments.append(Segment(" " + fit(text, self._widths[k], _COLUMN[k].right), style))
        return Strip(segments).adjust_cell_length(width, plain)

    def _header_strip(self, width: int) -> Strip:
        style = self._styles()["header"]
        parts = []
        for k in self._visible:
            col, cells = _COLUMN[k], self._widths[k]
            # The sort arrow borrows the separator cell, so no label is ever cut: after a
            # right-aligned label, before a left-aligned one.
            if self._sort[0] != k:
                parts.append(" " + fit(col.label, cells, col.right))
                continue
            arrow = "▼" if self._sort[1] else "▲"
            if col.right:
                parts.append(fit(col.label + arrow, cells + 1, right=True))
            else:
                parts.append(arrow + fit(col.label, cells))
        return Strip([Segment("".join(parts), style)]).adjust_cell_length(width, style)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if not self._widths:
            self._update_widths()
        if y == 0:
            if self._header is None or self._header.cell_length != width:
                self._header = self._header_strip(width)
            return self._header
        i = int(self.scroll_y) + y - 1
        if i >= len(self.rows):
            return Strip.blank(width, self._styles()["base"])
        strip = self._strips.get(i)
        if strip is None or strip.cell_length != width:
            strip = self._strips[i] = self._row_strip(i, width)
        return strip

    def _content_line(self, y: int, width: int) -> Strip:
        """A row set in what Textual drew beside it (render.KeepsFrame): a table tick changes a
        few cells of most rows on screen. A scrollbar comes or goes with a change in the number
        of rows or in the size, which refresh the whole table."""
        return self.render_line(y)

    def _refresh_row(self, i: int) -> None:
        self._strips.pop(i, None)
        y = i - int(self.scroll_y) + 1
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.scrollable_content_region.width, 1))

    def _changed_cells(self, i: int, top: int, height: int) -> list[Region]:
        """Row `i` has new text: the cells that changed (a CPU % or a size), not the row. A row
        not on screen (the first row in view is `top`, the table `height` lines high) is drawn
        when it scrolls in."""
        old = self._strips.pop(i, None)
        y = i - top + 1
        if not 1 <= y < height:
            return []
        if old is None:
            return [Region(0, y, self.scrollable_content_region.width, 1)]
        new = self._strips[i] = self._row_strip(i, old.cell_length)
        return [Region(x1, y, x2 - x1, 1) for x1, x2 in changed_spans(old, new)]

    def on_resize(self, event: Resize) -> None:
        narrow = event.size.width < NARROW_WIDTH
        self._visible = tuple(k for k in COLUMN_KEYS if not (narrow and k in NARROW_HIDES))
        self._cells = [self._visible_cells(r) for r in self.rows]
        self._update_widths()
        self._strips.clear()
        self._header = None
        self.virtual_size = Size(event.size.width, len(self.rows) + 1)
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._palette = {}
        self._strips.clear()
        self._header = None
        self._frame = None

    def watch_scroll_y(self, old: float, new: float) -> None:
        self._strips.clear()  # cached by row index, and the rows under each line moved
        super().watch_scroll_y(old, new)

    def on_focus(self) -> None:
        self._refresh_row(self.cursor)

    def on_blur(self) -> None:
        self._refresh_row(self.cursor)

    # -- moving ---------------------------------------------------------------------------------

    def move_cursor(self, row: int) -> None:
        row = max(0, min(row, len(self.rows) - 1))
        if row != self.cursor:
            old, self.cursor = self.cursor, row
            self._refresh_row(old)
            self._refresh_row(row)
        self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + visible:
            self.scroll_to(y=self.cursor - visible + 1, animate=False)

    def action_move(self, step: int) -> None:
        self.move_cursor(self.cursor + step)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor + direction * max(1, self.size.height - 2))

    def action_select(self) -> None:
        row = self.selected_row
        if row is not None:
            self.post_message(self.Selected(row))

    def on_click(self, event: Click) -> None:
        if event.y == 0:
            x = 0
            for k in self._visible:
                x += self._widths[k] + 1
                if event.x < x:
                    self.post_message(self.HeaderClicked(k))
                    return
            return
        self.focus()
        self.move_cursor(int(self.scroll_y) + event.y - 1)
        if event.chain >= 2:
            self.action_select()
