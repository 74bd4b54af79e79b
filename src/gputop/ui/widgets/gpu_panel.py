"""All GPUs: one line each (compact) or one card each, with a selected GPU.

Both layouts are built once per set of GPUs; only the visible one is updated each tick, and the
other is brought up to date when the layout switches. ↑ ↓ ← → move the selection, Enter (or a
second click) opens the selected GPU's detail view."""

from __future__ import annotations

import math
from collections.abc import Mapping

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.content import Content
from textual.message import Message
from textual.widget import Widget

from gputop.model import Snapshot
from gputop.model.memory_split import MemorySplit, memory_splits
from gputop.ui import memory
from gputop.ui.view import styles
from gputop.ui.view.history import GpuHistory
from gputop.ui.widgets.gpu_card import CARD_HEIGHT, GpuCard
from gputop.ui.widgets.gpu_row import GpuRow, header_line
from gputop.ui.widgets.text_line import TextLine

COMPACT = "compact"
CARDS = "cards"
CARD_MIN_WIDTH = 58


def card_columns(width: int, count: int) -> int:
    """How many cards side by side at `width` columns."""
    return max(1, min(4, width // CARD_MIN_WIDTH, max(1, count)))


def card_height(width: int, count: int) -> int:
    """Rows of the screen the cards take at `width` columns."""
    return math.ceil(max(1, count) / card_columns(width, count)) * CARD_HEIGHT


class GpuPanel(Widget, can_focus=True):
    DEFAULT_CSS = """
    GpuPanel {
        height: auto;
    }
    GpuPanel > #gpu-rows {
        height: auto;
    }
    GpuPanel #gpu-split { display: none; }
    GpuPanel.-split #gpu-split { display: block; }
    GpuPanel > #gpu-cards {
        height: auto;
        grid-size: 2;
        grid-rows: 7;
        grid-gutter: 0 1;
    }
    GpuPanel.-compact > #gpu-cards { display: none; }
    GpuPanel.-cards > #gpu-rows { display: none; }
    /* The selection shows while the GPUs have the focus (Tab), so it is clear what Enter,
       d and the arrows act on. */
    GpuPanel:focus GpuRow.-selected {
        background: $primary 35%;
    }
    GpuPanel:focus GpuCard.-selected { border: heavy $accent; }
    GpuPanel:focus GpuCard.-selected.-warning { border: heavy $warning; }
    GpuPanel:focus GpuCard.-selected.-critical { border: heavy $error; }
    """

    BINDINGS = [
        Binding("up", "move(-1, 0)", "Up", show=False),
        Binding("down", "move(1, 0)", "Down", show=False),
        Binding("left", "move(0, -1)", "Left", show=False),
        Binding("right", "move(0, 1)", "Right", show=False),
        Binding("enter", "open", "Detail", show=False),
    ]

    class Opened(Message):
        """The user asked for a GPU's detail view."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, histories: Mapping[int, GpuHistory], *, id: str | None = None) -> None:
        super().__init__(id=id, classes="-compact")
        self._histories = histories
        self.mode = COMPACT
        self.columns = 2
        self.selected: int | None = None
        self._indices: tuple[int, ...] = ()
        self._rows: dict[int, GpuRow] = {}
        self._cards: dict[int, GpuCard] = {}
        self._header = TextLine(id="gpu-header")
        self._split_line = TextLine(id="gpu-split")
        self._row_box = Vertical(self._header, self._split_line, id="gpu-rows")
        self._card_box = Grid(id="gpu-cards")
        self._last: Snapshot | None = None
        self._splits: dict[int, MemorySplit] = {}

    def compose(self) -> ComposeResult:
        yield self._row_box
        yield self._card_box

    @property
    def indices(self) -> tuple[int, ...]:
        return self._indices

    def set_mode(self, mode: str, columns: int) -> None:
        changed = mode != self.mode
        self.mode = mode
        self.set_class(mode == COMPACT, "-compact")
        self.set_class(mode == CARDS, "-cards")
        if columns != self.columns:
            self.columns = columns
            self._card_box.styles.grid_size_columns = columns
        if changed and self._last is not None:
            self.update(self._last)

    def on_mount(self) -> None:
        if self._last is not None:  # a snapshot that came before the widgets were up
            self.update(self._last)

    def update(self, snap: Snapshot, slow: bool = True) -> None:
        """Show a snapshot; the histories were pushed already. On ticks that are not `slow`
        the cards leave their temperature and clock lines as they are."""
        self._last = snap
        if not self.is_mounted:
            return
        indices = tuple(d.index for d in snap.devices)
        if indices != self._indices:
            self._rebuild(indices)
        self._splits = splits = memory_splits(snap)
        self.set_class(bool(splits) and self.mode == COMPACT, "-split")
        for d in snap.devices:
            split = splits.get(d.index)
            if self.mode == COMPACT:
                row = self._rows.get(d.index)
                if row is not None:
                    row.update(d, split)
            else:
                card = self._cards.get(d.index)
                if card is not None:
                    card.update(d, slow, split)
        if self.mode == COMPACT and splits:
            self._show_split()

    def _rebuild(self, indices: tuple[int, ...]) -> None:
        # Happens once at start (and if a GPU appears or goes away for good): not per tick.
        self._indices = indices
        for widget in [*self._rows.values(), *self._cards.values()]:
            widget.remove()
        self._rows = {i: GpuRow(i) for i in indices}
        self._cards = {i: GpuCard(i, self._histories[i]) for i in indices}
        self._row_box.mount_all(self._rows.values(), before=self._split_line)
        self._card_box.mount_all(self._cards.values())
        if self.selected not in indices:
            self.selected = indices[0] if indices else None
        self._show_selection()

    def select(self, index: int) -> None:
        if index in self._indices and index != self.selected:
            self.selected = index
            self._show_selection()

    def _show_selection(self) -> None:
        for i, row in self._rows.items():
            row.select(i == self.selected)
        for i, card in self._cards.items():
            card.select(i == self.selected)
        if self.mode == COMPACT and self._splits:
            self._show_split()

    def _show_split(self) -> None:
        """Below the lines, the selected GPU's memory split in words: the legend of the bars."""
        width = self.size.width or 80
        split = self._splits.get(self.selected) if self.selected is not None else None
        if split is not None:
            head = f" GPU {self.selected} memory  "
            line = Content.assemble((head, styles.LABEL),
                                    memory.legend(split, width - len(head)))
        else:
            line = Content.assemble(
                (" memory  ", styles.LABEL), memory.names(),
                (f"  (GPU {self.selected}: no probe)" if self.selected is not None else "",
                 styles.LABEL))
        self._split_line.set(line)

    def action_move(self, down: int, right: int) -> None:
        if not self._indices or self.selected is None:
            return
        pos = self._indices.index(self.selected)
        step = down * self.columns + right if self.mode == CARDS else down or right
        pos = max(0, min(len(self._indices) - 1, pos + step))
        self.select(self._indices[pos])

    def action_open(self) -> None:
        if self.selected is not None:
            self.post_message(self.Opened(self.selected))

    def on_resize(self) -> None:
        self._header.set(header_line(self.size.width))
        if self._splits:
            self._show_split()

    def on_gpu_row_clicked(self, event: GpuRow.Clicked) -> None:
        self._clicked(event.index, event.chain)

    def on_gpu_card_clicked(self, event: GpuCard.Clicked) -> None:
        self._clicked(event.index, event.chain)

    def _clicked(self, index: int, chain: int) -> None:
        self.focus()
        self.select(index)
        if chain >= 2:
            self.post_message(self.Opened(index))
