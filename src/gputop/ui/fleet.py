"""`gputop fleet`: one row per node of a Prometheus-watched fleet, Enter for a node's GPUs.

The fleet (gputop.fleet.model) is asked in a worker thread every `interval`; a slow Prometheus
stretches the interval instead of stacking queries. Each `FleetView` is applied in one
`batch_update()`: table cells change only where their text changed, and the rows are rebuilt only
when nodes come or go. Every label value (host names, GPU models, Finding titles) comes from the
scraped nodes and is shown as text, never as markup.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gputop.fleet.model import DOWN, GONE, STALE, FleetView, Gpu, Node, NodeKey
from gputop.ui.screens.help import HelpScreen, fleet_help_content
from gputop.ui.text import safe_content, sanitize
from gputop.ui.theme import apply_theme
from gputop.ui.view import format as fmt
from gputop.ui.view import styles
from gputop.ui.view.keys import FLEET_KEYS
from gputop.ui.view.status import CROSS, THROTTLE_BADGES
from gputop.ui.widgets.findings_panel import FindingsPanel


class FleetSource(Protocol):
    @property
    def url(self) -> str: ...

    def refresh(self) -> FleetView: ...


NA = "-"
# Rich styles (DataTable cells are Rich Text, which does not know theme variables); every state a
# colour marks also has a word or a glyph.
_STATE_CELL = {
    DOWN: (f"{CROSS} DOWN", "bold red"),
    STALE: ("▲ STALE", "bold yellow"),
    GONE: (f"{CROSS} GONE", "bold red"),
}
_SEVERITY_GLYPH = {"critical": CROSS, "warning": "▲", "info": "●"}
_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": ""}

Cell = tuple[str, str]  # text, Rich style
Column = tuple[str, str, int]  # key, heading, width

# Below this many columns the tables drop what matters least (power; a GPU's model).
NARROW_WIDTH = 100
NODE_COLUMNS = (("node", "NODE", 22), ("state", "STATE", 8), ("gpus", "GPUs", 4),
                ("util", "UTIL avg/max", 12), ("mem", "MEMORY", 13), ("temp", "TEMP", 6),
                ("power", "POWER", 8), ("findings", "FINDINGS", 8), ("seen", "LAST SEEN", 10))
NODE_COLUMNS_NARROW = (("node", "NODE", 15), ("state", "STATE", 7), ("gpus", "GPUs", 4),
                       ("util", "UTIL", 9), ("mem", "MEMORY", 11), ("temp", "TEMP", 4),
                       ("findings", "FIND", 4), ("seen", "SEEN", 9))
GPU_COLUMNS = (("gpu", "GPU", 5), ("model", "MODEL", 22), ("util", "UTIL", 5),
               ("mem", "MEMORY", 13), ("temp", "TEMP", 6), ("power", "POWER", 6),
               ("sm", "SM MHz", 6), ("throttle", "THROTTLE", 30))
GPU_COLUMNS_NARROW = (("gpu", "GPU", 4), ("util", "UTIL", 5), ("mem", "MEMORY", 13),
                      ("temp", "TEMP", 5), ("power", "POWER", 5), ("sm", "SM", 5),
                      ("throttle", "THROTTLE", 22))


# -- cells (pure) -------------------------------------------------------------------------------


def _num(v: float | None, fmt_: Callable[[float], str]) -> str:
    return NA if v is None else fmt_(v)


def memory(used: float | None, total: float | None) -> str:
    if used is None:
        return NA
    if total is None:
        return f"{fmt.gib(used)} GiB"
    return f"{fmt.gib(used)}/{fmt.gib(total)} GiB"


def power(w: float | None) -> str:
    if w is None:
        return NA
    return f"{w / 1000:.1f} kW" if w >= 10_000 else f"{w:.0f} W"


def last_seen(node: Node, now: float | None) -> str:
    if node.last_seen is None or now is None:
        return NA
    age = now - node.last_seen
    return "now" if node.reporting and age <= node.scrape_interval else f"{fmt.age(age)} ago"


def node_cells(node: Node, now: float | None) -> tuple[Cell, ...]:
    """The row of one node. A node not reporting keeps its name, GPU count and last-seen time;
    its values would be old, so they are not shown."""
    dim = "" if node.reporting else "dim"
    state, state_style = _STATE_CELL.get(node.state, ("up", ""))
    name = sanitize(node.name, 200)
    if not node.reporting:
        blank = (NA, dim)
        return ((name, "bold"), (state, state_style), (str(len(node.gpus)), dim),
                blank, blank, blank, blank, blank, (last_seen(node, now), state_style))
    worst = min((f.severity for f in node.findings),
                key=lambda s: ("critical", "warning", "info").index(s)
                if s in ("critical", "warning", "info") else 3, default=None)
    findings = (f"{_SEVERITY_GLYPH.get(worst or '', '●')} {len(node.findings)}"
                if node.findings else "0")
    util = (NA if node.util_mean is None
            else f"{node.util_mean:.0f}%/{_num(node.util_max, fmt.percent)}")
    return ((name, ""), (state, state_style), (str(len(node.gpus)), ""), (util, ""),
            (memory(node.mem_used, node.mem_total), ""), (_num(node.temp_max, fmt.celsius), ""),
            (power(node.power), ""), (findings, _SEVERITY_STYLE.get(worst or "", "")),
            (last_seen(node, now), ""))


def throttle_cell(reasons: tuple[str, ...] | None) -> Cell:
    """The reasons worth a glance, most severe first, in words ("▲ HW THERMAL", "PWR CAP")."""
    if reasons is None:
        return (NA, "dim")
    rank = {"critical": 0, "warning": 1, "info": 2}
    badges = sorted((THROTTLE_BADGES[r] for r in reasons if r in THROTTLE_BADGES),
                    key=lambda b: rank[b[1]])
    if not badges:
        return ("idle" if "gpu_idle" in reasons else "none", "dim")
    return (" ".join(word for word, _ in badges), _SEVERITY_STYLE[badges[0][1]])


def gpu_cells(gpu: Gpu, reporting: bool) -> tuple[Cell, ...]:
    dim = "" if reporting else "dim"
    throttle = throttle_cell(gpu.throttle) if reporting else (NA, dim)
    name = fmt.short_gpu_name(gpu.model) + (f" MIG x{gpu.mig_instances}"
                                            if gpu.mig_instances else "")
    return ((sanitize(gpu.id, 20), "bold"), (sanitize(name, 100), dim),
            (_num(gpu.util, fmt.percent), dim), (memory(gpu.mem_used, gpu.mem_total), dim),
            (_num(gpu.temp, fmt.celsius), dim), (_num(gpu.power, fmt.watts), dim),
            (_num(gpu.sm_clock, fmt.mhz), dim), throttle)


def header_lines(view: FleetView, url: str, interval: float) -> Content:
    """Two lines: the fleet at a glance, then how fresh it is (or why the last refresh failed)."""
    gone = view.not_reporting
    utils = [u for n in view.nodes if n.reporting and (u := n.util_mean) is not None]
    first: list[Any] = [("gputop fleet", "bold"), "  ",
             (f"{len(view.nodes)} nodes · {view.gpu_count} GPUs", "bold")]
    if gone:
        first += ["  ", (f" {CROSS} {len(gone)} not reporting ", styles.badge_style("critical"))]
    if utils:
        first += [("  util ", styles.LABEL), f"{sum(utils) / len(utils):.0f}%"]
    if view.findings:
        first += [("  findings ", styles.LABEL), str(len(view.findings))]
    when = NA if view.time is None else fmt.clock_time(view.time)
    second: list[Any]
    if view.error:
        second = [(" ▲ PROMETHEUS ", styles.badge_style("warning")), " ",
                  safe_content(view.error, styles.text_style("warning"), 300),
                  (f"  (showing {when})", styles.LABEL)]
    else:
        second = [safe_content(url, styles.LABEL, 200), ("  data of ", styles.LABEL), when,
                  (f" · every {interval:g} s", styles.LABEL)]
    return Content("\n").join([Content.assemble(*first), Content.assemble(*second)])


# -- widgets ------------------------------------------------------------------------------------


class CellTable(DataTable[Text]):
    """A DataTable of text cells keyed by row: `show` updates only the cells whose text
    changed and rebuilds the rows only when they come, go or move. Below NARROW_WIDTH columns it
    shows the `narrow` set of columns (a subset, in the same order)."""

    DEFAULT_CSS = """
    CellTable {
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    """

    def __init__(self, columns: Sequence[Column], narrow: Sequence[Column] = (), *,
                 id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self._keys = [key for key, _, _ in columns]
        self._wide, self._narrow = tuple(columns), tuple(narrow or columns)
        self._shown: tuple[Column, ...] = ()
        self._index: list[int] = []  # where each shown column's cell is in a row's cells
        self._rows: dict[str, tuple[Cell, ...]] = {}

    def on_resize(self) -> None:
        self._lay_out()

    def _lay_out(self) -> None:
        """Add the columns that fit (the first `show` may come before this table's mount)."""
        wanted = self._narrow if 0 < self.size.width < NARROW_WIDTH else self._wide
        if wanted == self._shown:
            return
        selected = self.selected_key
        self.clear(columns=True)
        self._shown = wanted
        self._index = [self._keys.index(key) for key, _, _ in wanted]
        for key, label, width in wanted:
            self.add_column(label, width=width, key=key)
        rows, self._rows = self._rows, {}
        self.show(list(rows.items()))
        self._select(selected)

    @property
    def selected_key(self) -> str | None:
        if not self._rows or not 0 <= self.cursor_row < self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def _select(self, key: str | None) -> None:
        if key in self._rows:
            self.move_cursor(row=list(self._rows).index(key), animate=False)

    def show(self, rows: Sequence[tuple[str, tuple[Cell, ...]]]) -> None:
        if not self._shown:
            self._lay_out()
        keys = [k for k, _ in rows]
        if keys != list(self._rows):
            selected = self.selected_key
            self.clear()
            for key, cells in rows:
                self.add_row(*(_text(cells[i]) for i in self._index), key=key)
            self._rows = dict(rows)
            self._select(selected)
            return
        for key, cells in rows:
            old = self._rows[key]
            for (column, _, _), i in zip(self._shown, self._index):
                if cells[i] != old[i]:
                    self.update_cell(key, column, _text(cells[i]))
        self._rows = dict(rows)


def _text(cell: Cell) -> Text:
    return Text(cell[0], style=cell[1], no_wrap=True, end="")


def row_key(key: NodeKey) -> str:
    return "\x1f".join(key)


class FleetScreen(Screen[None]):
    DEFAULT_CSS = """
    FleetScreen #fleet-header {
        height: 2; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis;
    }
    FleetScreen #fleet-findings { max-height: 8; }
    """
    BINDINGS = [Binding("r", "app.refresh_now", "Refresh now")]

    def __init__(self) -> None:
        super().__init__()
        self.header = Static(id="fleet-header")
        self.table = CellTable(NODE_COLUMNS, NODE_COLUMNS_NARROW, id="nodes")
        self.findings = FindingsPanel(id="fleet-findings")
        self._node_keys: dict[str, NodeKey] = {}  # row key -> node

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.table
        yield self.findings
        yield Footer()

    def apply_view(self, view: FleetView, url: str, interval: float) -> None:
        self.header.update(header_lines(view, url, interval), layout=False)
        self._node_keys = {row_key(n.key): n.key for n in view.nodes}
        self.table.show([(row_key(n.key), node_cells(n, view.time)) for n in view.nodes])
        self.findings.set_findings(view.findings)
        self.findings.border_title = Content(f"Findings across the fleet ({len(view.findings)})")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = self._node_keys.get(event.row_key.value or "")
        app = self.app
        if key is not None and isinstance(app, FleetApp):
            app.open_node(key)


class NodeScreen(Screen[None]):
    """One node's GPUs and its open Findings, updated with every refresh."""

    DEFAULT_CSS = """
    NodeScreen #node-header {
        height: 2; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis;
    }
    NodeScreen #node-findings { max-height: 10; }
    """
    BINDINGS = [Binding("escape", "app.pop_screen", "Back to the fleet")]

    def __init__(self, key: NodeKey) -> None:
        super().__init__()
        self.key = key
        self.header = Static(id="node-header")
        self.table = CellTable(GPU_COLUMNS, GPU_COLUMNS_NARROW, id="gpus")
        self.findings = FindingsPanel(id="node-findings")

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.table
        yield self.findings
        yield Footer()

    def apply_view(self, view: FleetView, url: str, interval: float) -> None:
        node = view.node(self.key)
        if node is None:
            _, instance, host = self.key
            self.header.update(Content.assemble(
                safe_content(host or instance, "bold", 200),
                ("  no longer in the fleet (gone for over an hour, or back under another "
                 "target)", styles.LABEL)), layout=False)
            self.table.show([])
            self.findings.set_findings([])
            return
        self.header.update(node_header(node, view), layout=False)
        self.table.show([(g.id, gpu_cells(g, node.reporting)) for g in node.gpus])
        self.findings.set_findings(node.findings)


def node_header(node: Node, view: FleetView) -> Content:
    state, _ = _STATE_CELL.get(node.state, ("up", ""))
    badge = (styles.badge_style("critical") if node.state in (DOWN, GONE)
             else styles.badge_style("warning") if node.state == STALE else "")
    first: list[Any] = [safe_content(node.name, "bold", 200), "  ",
                        (f" {state} " if badge else "● up", badge or styles.OK)]
    if node.why:
        first += ["  ", safe_content(node.why, styles.LABEL, 200)]
    second: list[Any] = [("target ", styles.LABEL), safe_content(node.instance, "", 200),
                         (" job ", styles.LABEL), safe_content(node.job, "", 100),
                         (f" · scraped every {node.scrape_interval:g} s", styles.LABEL)]
    if node.last_seen is not None:
        second += [(" · last sample ", styles.LABEL), fmt.clock_time(node.last_seen)]
    if not node.reporting:
        second += [("  (values as last seen)", styles.LABEL)]
    return Content("\n").join([Content.assemble(*first), Content.assemble(*second)])


# -- the app ------------------------------------------------------------------------------------


class FleetApp(App[None]):
    TITLE = "gputop fleet"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        *(Binding(k.keys, k.action or "", k.description, show=k.show)
          for k in FLEET_KEYS if k.action != "refresh_now"),
    ]

    def __init__(self, fleet: FleetSource | None, *, view: FleetView | None = None,
                 url: str = "", interval: float = 5.0, mouse: bool = True,
                 ansi: bool = False, theme: str | None = None) -> None:
        super().__init__(ansi_color=True if ansi else None)
        apply_theme(self, theme, ansi)
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            self.animation_level = "none"
        self.fleet = fleet
        self.view = view or FleetView()
        self.url = url or (fleet.url if fleet is not None else "")
        self.interval = interval
        self.mouse = mouse
        self.fleet_screen = FleetScreen()
        self.refresh_seconds: deque[float] = deque(maxlen=100)  # the last refreshes' durations
        self._wake = asyncio.Event()

    def get_default_screen(self) -> FleetScreen:
        return self.fleet_screen

    def run(self, *, mouse: bool | None = None, **kwargs: Any) -> Any:
        return super().run(mouse=self.mouse if mouse is None else mouse, **kwargs)

    def on_mount(self) -> None:
        self.apply_view(self.view)
        if self.fleet is not None:
            self.run_worker(self._refresh_loop(), name="fleet", group="fleet", exclusive=True,
                            exit_on_error=False)

    async def _refresh_loop(self) -> None:
        assert self.fleet is not None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            started = time.perf_counter()
            try:
                view = await asyncio.to_thread(self.fleet.refresh)  # blocking HTTP: off the loop
            except Exception as e:  # a bug must not stop the refreshes without a word
                view = replace(self.view, error=f"refresh failed: {type(e).__name__}: {e}")
            self.refresh_seconds.append(time.perf_counter() - started)
            self.apply_view(view)

    def apply_view(self, view: FleetView) -> None:
        """Show one refresh, on every screen that shows the fleet, in one repaint."""
        self.view = view
        with self.batch_update():
            self.fleet_screen.apply_view(view, self.url, self.interval)
            if isinstance(self.screen, NodeScreen):
                self.screen.apply_view(view, self.url, self.interval)

    def open_node(self, key: NodeKey) -> None:
        screen = NodeScreen(key)
        self.push_screen(screen)
        screen.call_after_refresh(screen.apply_view, self.view, self.url, self.interval)

    def action_refresh_now(self) -> None:
        self._wake.set()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(content=fleet_help_content(), title="gputop fleet help"))
