"""The live dashboard: header, warnings, GPUs, findings, and the process table.

The app hands it every Snapshot; it updates in place inside the app's batch_update. Cards or
lines follow the terminal size; the process table refreshes on a slower cadence than the GPUs
(the table is what costs CPU and bytes over SSH)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.events import Resize
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from gputop.model import Snapshot
from gputop.ui.messages import DetailRequested, KillRequested, Say, TopologyRequested
from gputop.ui.text import safe_content
from gputop.ui.view import styles
from gputop.ui.view.history import GpuHistory
from gputop.ui.view.keys import APP_KEYS
from gputop.ui.view.process_rows import COLUMN_KEYS, COLUMNS, Row, build_rows
from gputop.ui.widgets.findings_panel import FindingsPanel
from gputop.ui.widgets.gpu_panel import CARDS, COMPACT, GpuPanel, card_columns, card_height
from gputop.ui.widgets.process_table import ProcessTable
from gputop.ui.widgets.status_header import StatusHeader
from gputop.ui.widgets.text_line import TextLine
from gputop.ui.widgets.warning_bar import WarningBar

APP_ACTIONS = {"quit", "help"}
# Columns where the biggest value is the interesting one sort high-to-low first.
DESCENDING_FIRST = {"gmem", "sm", "cpu", "rss", "time"}
CHROME_ROWS = 11  # header, warnings, process status + header + a few rows, footer
# Below the GPUs, however many: the process status line, the table's header and two rows.
PROCESS_ROWS = 4
LAYOUTS = (None, COMPACT, CARDS)
MIN_WIDTH, MIN_HEIGHT = 60, 15  # smaller, the GPU lines lose their figures


class DashboardScreen(Screen[None]):
    DEFAULT_CSS = """
    DashboardScreen {
        layout: vertical;
    }
    DashboardScreen > #filter {
        display: none;
        height: 1;
        border: none;
        padding: 0 1;
        background: $boost;
    }
    DashboardScreen > #filter.-shown {
        display: block;
    }
    DashboardScreen > #proc-status {
        background: $panel;
        padding: 0 1;
    }
    /* Over everything else (docked, on the top layer) while the terminal is too small. */
    DashboardScreen {
        layers: base notice;
    }
    DashboardScreen > #too-small {
        display: none;
        dock: top;
        layer: notice;
        width: 100%;
        height: 100%;
        background: $background;
        content-align: center middle;
        text-align: center;
    }
    DashboardScreen.-too-small > #too-small {
        display: block;
    }
    """
    BINDINGS = [
        *(Binding(k.keys, k.action, k.description, show=k.show)
          for k in APP_KEYS if k.action and k.action not in APP_ACTIONS),
        Binding("escape", "escape", "Clear filter", show=False),
    ]

    def __init__(self, *, clock: Callable[[], float], interval: float, suffix: str,
                 table_interval: float, histories: Mapping[int, GpuHistory],
                 position: Callable[[float], str] | None = None,
                 readonly: bool = False) -> None:
        super().__init__()
        if readonly:  # k still says why nothing is killed, but the footer does not offer it
            self._bindings = self._bindings.copy()
            keys = self._bindings.key_to_bindings  # a new dict; its lists are the class's
            for key, bindings in keys.items():
                keys[key] = [dataclasses.replace(b, show=False) if b.action == "kill" else b
                             for b in bindings]
        self._table_interval = table_interval
        self._next_table = 0.0
        self.snapshot: Snapshot | None = None
        self.header = StatusHeader(clock, interval, suffix, position=position, id="header")
        self.warnings = WarningBar(id="warnings")
        self.gpus = GpuPanel(histories, id="gpus")
        self.findings = FindingsPanel(id="findings")
        self.filter_input = Input(placeholder="filter: words, user:NAME, gpu:N — Enter keeps, "
                                  "Esc clears", id="filter")
        self.filter_input.cursor_blink = False  # a blinking cursor is a timer and a repaint
        self.proc_status = TextLine(id="proc-status")
        self.proc_status.repaints_now = True  # it changes with the table, as a tick is shown
        self.table = ProcessTable(id="processes")
        self.too_small = Static(id="too-small")
        self.query_text = ""
        self.sort_column = "gpu"
        self.sort_reverse = False
        self.expanded: set[str] = set()
        self.layout_override: str | None = None
        self._layout_count = -1  # GPUs the layout was chosen for
        self._extra_warnings: tuple[str, ...] = ()
        self._gpu_rows = -1  # the most rows the GPUs may take

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.warnings
        yield self.gpus
        yield self.findings
        yield self.proc_status
        yield self.filter_input
        yield self.table
        yield Footer()
        yield self.too_small

    def on_mount(self) -> None:
        self.table.focus()
        self._show_proc_status([])

    # What became of the feed: "" while it runs, then ENDED or FAILED (widgets.status_header).
    feed_state: reactive[str] = reactive("", init=False)

    # -- data -----------------------------------------------------------------------------------

    def watch_feed_state(self, state: str) -> None:
        self.header.set_state(state)

    def refresh_header(self) -> None:
        """Recompute the header line now (a replay moved, its findings caught up)."""
        self.header.tick()

    @property
    def active(self) -> bool:
        """Seen: the top screen, or under dialogs (help, kill) that leave it in view."""
        stack = self.app.screen_stack
        if self not in stack:
            return False
        return all(isinstance(s, ModalScreen) for s in stack[stack.index(self) + 1:])

    def apply_snapshot(self, snap: Snapshot, *, force_table: bool = False) -> None:
        self.snapshot = snap
        if not self.active:
            return  # hidden: caught up in on_screen_resume
        self.header.set_snapshot(snap)
        self.warnings.set_warnings((*self._extra_warnings, *snap.warnings))
        self._fit_gpus()
        now = time.monotonic()
        slow = force_table or self._table_interval <= 0 or now >= self._next_table
        self.gpus.update(snap, slow)
        if len(self.gpus.indices) != self._layout_count:
            self._apply_layout()
        if slow:
            self._next_table = now + self._table_interval
            self.refresh_table()

    def add_warning(self, text: str) -> None:
        """A warning of the app's own (the feed failed or ended), kept above the snapshot's."""
        self._extra_warnings = (*self._extra_warnings, text)
        if self.snapshot is not None:
            self.warnings.set_warnings((*self._extra_warnings, *self.snapshot.warnings))
        else:
            self.warnings.set_warnings(self._extra_warnings)
        self._fit_gpus()

    def set_findings(self, findings: Iterable[Any]) -> None:
        self.findings.set_findings(findings)
        self._fit_gpus()

    def on_screen_resume(self) -> None:
        if self.snapshot is not None:
            self.apply_snapshot(self.snapshot, force_table=True)

    def refresh_table(self) -> None:
        rows = build_rows(self.snapshot, query=self.query_text, sort=self.sort_column,
                          reverse=self.sort_reverse, expanded=self.expanded)
        self.table.show(rows)
        self._show_proc_status(rows)

    def _show_proc_status(self, rows: list[Row]) -> None:
        total = len(self.snapshot.processes) if self.snapshot else 0
        shown = sum(1 for r in rows if r.child is None)
        col = COLUMNS[COLUMN_KEYS.index(self.sort_column)]
        parts: list[Content | tuple[str, str] | str] = [("PROCESSES ", "bold")]
        if total == 0:
            parts.append(("none on the GPUs" if self.snapshot else "…", styles.LABEL))
        else:
            parts.append(f"{total}")
        if self.query_text:
            parts += [(f"  {shown} match ", styles.LABEL),
                      safe_content(self.query_text, "bold", max_length=60)]
        parts += [("  sort ", styles.LABEL),
                  f"{col.label} {'▼' if self.sort_reverse else '▲'}"]
        self.proc_status.set(Content.assemble(*parts))

    # -- layout ---------------------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        width, height = self.size
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        if small:
            self.too_small.update(Content.assemble(
                ("Terminal too small", "bold"),
                f"\n{width}x{height}: gputop needs {MIN_WIDTH}x{MIN_HEIGHT}\n",
                ("make the window larger, or q to quit", styles.LABEL)))
        self.set_class(small, "-too-small")
        self._apply_layout()

    def _fit_gpus(self) -> None:
        """However many GPUs, the Findings and a few processes stay on screen: the GPUs get
        the rest of the height and scroll (the selection follows the arrow keys)."""
        if not self.is_mounted:
            return  # done on the first resize
        rows = self.size.height - 1 - 1 - PROCESS_ROWS  # header, footer
        rows -= self.warnings.rows + self.findings.rows
        rows = max(3, rows)
        if rows != self._gpu_rows:
            self._gpu_rows = rows
            self.gpus.styles.max_height = rows

    def _apply_layout(self) -> None:
        self._fit_gpus()
        width, height = self.size
        self._layout_count = len(self.gpus.indices)
        count = self._layout_count or 1
        mode = self.layout_override
        if mode is None:
            fits = width >= 100 and card_height(width, count) + CHROME_ROWS <= height
            mode = CARDS if fits else COMPACT
        self.gpus.set_mode(mode, card_columns(width, count))

    def action_layout(self) -> None:
        self.layout_override = LAYOUTS[(LAYOUTS.index(self.layout_override) + 1) % len(LAYOUTS)]
        self._apply_layout()
        self.post_message(Say(f"layout: {self.layout_override or 'auto'}"))

    # -- processes ------------------------------------------------------------------------------

    def action_sort(self, step: int) -> None:
        i = (COLUMN_KEYS.index(self.sort_column) + step) % len(COLUMN_KEYS)
        self._sort_by(COLUMN_KEYS[i])

    def _sort_by(self, column: str, reverse: bool | None = None) -> None:
        self.sort_column = column
        self.sort_reverse = column in DESCENDING_FIRST if reverse is None else reverse
        self.table.set_sort(self.sort_column, self.sort_reverse)
        self.refresh_table()

    def action_reverse(self) -> None:
        self._sort_by(self.sort_column, not self.sort_reverse)

    def on_process_table_header_clicked(self, event: ProcessTable.HeaderClicked) -> None:
        key = event.column
        if key == self.sort_column:
            self.action_reverse()
        else:
            self._sort_by(key)

    def action_expand(self) -> None:
        row = self.table.selected_row
        if row is None:
            return
        key = row.proc.key
        if key in self.expanded:
            self.expanded.discard(key)
        elif row.proc.children:
            self.expanded.add(key)
        else:
            self.post_message(Say(f"PID {row.proc.pid} has no worker processes"))
            return
        self.refresh_table()

    def on_process_table_selected(self, event: ProcessTable.Selected) -> None:
        self.action_expand()

    def action_filter(self) -> None:
        self.filter_input.add_class("-shown")
        self.filter_input.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self.filter_input:
            self.query_text = event.value.strip()
            self.refresh_table()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input is self.filter_input:
            if not event.value.strip():
                self.filter_input.remove_class("-shown")
            self.table.focus()

    def action_escape(self) -> None:
        if self.filter_input.has_class("-shown"):
            self.filter_input.value = ""
            self.query_text = ""
            self.filter_input.remove_class("-shown")
            self.table.focus()
            self.refresh_table()

    def action_kill(self) -> None:
        row = self.table.selected_row
        if row is None:
            self.post_message(Say("no process selected", "warning"))
            return
        if row.child is not None:
            self.post_message(Say("select the GPU process itself to kill it (this row is one of "
                                  "its workers)", "warning"))
            return
        self.post_message(KillRequested(row.proc))

    # -- GPUs -----------------------------------------------------------------------------------

    def selected_gpu(self) -> int | None:
        if self.focused is self.table and self.table.selected_row is not None:
            return self.table.selected_row.proc.device_index
        return self.gpus.selected

    def action_detail(self) -> None:
        index = self.selected_gpu()
        if index is not None:
            self.post_message(DetailRequested(index))

    def on_gpu_panel_opened(self, event: GpuPanel.Opened) -> None:
        self.post_message(DetailRequested(event.index))

    def action_topology(self) -> None:
        self.post_message(TopologyRequested())
