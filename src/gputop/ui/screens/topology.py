"""How the GPUs are joined: the GPU-to-GPU matrix (as `nvidia-smi topo -m` prints it) with
CPU and NUMA affinity, and every NVLink / xGMI link with its state, throughput and errors."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gputop.model import LinkSample, Missing, Snapshot, Topology
from gputop.ui.text import safe_content, safe_text
from gputop.ui.view import format as fmt
from gputop.ui.view import styles
from gputop.ui.view.status import CROSS

# Path kinds from fastest to slowest; the style is a hint, the letters are the information.
PATH_STYLES = {
    "X": styles.MUTED,
    "PIX": "$text-primary",
    "PXB": "$text-primary",
    "PHB": "$text-warning",
    "NODE": "$text-warning",
    "SYS": "$text-error",
}
LEGEND = (
    "X self · NV# # NVLinks · PIX one PCIe switch · PXB several PCIe switches",
    "PHB host bridge · NODE same NUMA node · SYS across NUMA nodes (slowest)",
)
LINKS_EVERY = 2.0  # seconds: 144 rows of counters are a slow panel


def path_style(kind: str) -> str:
    if kind.startswith("NV") or kind.startswith("XGMI"):
        return "bold $text-success"
    return PATH_STYLES.get(kind, "")


def matrix_content(topo: Topology | None, count: int) -> Content:
    if topo is None or not topo.matrix:
        return Content(
            "No GPU-to-GPU topology from this backend (a single GPU, or not supported)."
        ).stylize(styles.MUTED)
    n = len(topo.matrix)
    cell = max(6, *(len(str(c)) + 2 for row in topo.matrix for c in row))
    head = [Content(" " * 7)]
    head += [Content(f"GPU{j}".ljust(cell)).stylize("bold") for j in range(n)]
    if topo.cpu_affinity:
        head.append(Content("CPU affinity".ljust(16)).stylize("bold"))
    if topo.numa_affinity:
        head.append(Content("NUMA").stylize("bold"))
    lines = [Content("").join(head)]
    for i, row in enumerate(topo.matrix):
        parts = [Content(f"GPU{i}".ljust(7)).stylize("bold")]
        for kind in row:
            parts.append(safe_content(str(kind).ljust(cell), path_style(str(kind))))
        if topo.cpu_affinity:
            aff = topo.cpu_affinity[i] if i < len(topo.cpu_affinity) else ""
            parts.append(safe_content(str(aff).ljust(16)))
        if topo.numa_affinity:
            numa = topo.numa_affinity[i] if i < len(topo.numa_affinity) else ""
            parts.append(safe_content(str(numa)))
        lines.append(Content("").join(parts))
    lines += [Content(""), *(Content(line).stylize(styles.MUTED) for line in LEGEND)]
    return Content("\n").join(lines)


LINK_COLUMNS = ("GPU", "LINK", "KIND", "STATE", "VER", "REMOTE", "SPEED", "RX", "TX", "ERRORS")


def _state(v: object) -> str:
    if isinstance(v, Missing):
        return v.label()
    return "● up" if v else f"{CROSS} DOWN"


def _errors(v: object) -> str:
    if isinstance(v, Missing):
        return v.label()
    counts = dict(v)  # type: ignore[call-overload]
    bad = {k: n for k, n in counts.items() if n}
    if not bad:
        return "0"
    return "▲ " + " ".join(f"{k} {n}" for k, n in sorted(bad.items()))


def _total(links: Sequence[LinkSample], attr: str) -> float | None:
    values = [getattr(lk, attr) for lk in links]
    present = [float(v) for v in values if not isinstance(v, Missing)]
    return sum(present) if present else None


def link_cells(lk: LinkSample) -> tuple[str, ...]:
    remote = fmt.label(lk.remote_bus_id)
    if not isinstance(lk.remote_kind, Missing) and lk.remote_kind not in ("gpu", "unknown"):
        remote = f"{lk.remote_kind} {remote}"
    return (
        str(lk.device_index),
        str(lk.link),
        lk.kind,
        _state(lk.up),
        fmt.label(lk.version),
        remote,
        fmt.label(lk.speed, fmt.rate),
        fmt.label(lk.rx, fmt.rate),
        fmt.label(lk.tx, fmt.rate),
        _errors(lk.errors),
    )


def links_summary(links: Sequence[LinkSample]) -> Content:
    """One line per GPU: links up, total throughput, errors."""
    if not links:
        return Content("No NVLink or xGMI links reported.").stylize(styles.MUTED)
    by_gpu: dict[int, list[LinkSample]] = {}
    for lk in links:
        by_gpu.setdefault(lk.device_index, []).append(lk)
    kinds = "/".join(sorted({lk.kind for lk in links}))
    head = f"{kinds + ' per GPU':<16}{'links':<10}{'RX total':>10}  {'TX total':>10}  errors"
    lines = [Content(head).stylize("bold")]
    for index, group in sorted(by_gpu.items()):
        up = sum(1 for lk in group if lk.up is True)
        down = sum(1 for lk in group if lk.up is False)
        rx, tx = _total(group, "rx"), _total(group, "tx")
        errors = sum(sum(dict(lk.errors).values()) for lk in group
                     if not isinstance(lk.errors, Missing))
        state = Content(f"{up:>2}/{len(group):<2} up")
        if down:
            state = Content(f"{CROSS} {down} DOWN").stylize(styles.text_style("critical"))
        lines.append(Content.assemble(
            (f"GPU{index:<13}", "bold"), state.pad_right(max(0, 10 - state.cell_length)),
            f"{'-' if rx is None else fmt.rate(rx):>10}  ",
            f"{'-' if tx is None else fmt.rate(tx):>10}  ",
            (f"{'▲ ' if errors else ''}{errors:,}", styles.text_style("warning") if errors else ""),
        ))
    return Content("\n").join(lines)


class TopologyScreen(Screen[None]):
    DEFAULT_CSS = """
    TopologyScreen > #topo-title {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    /* One page that scrolls: the matrix, the per-GPU summary, then every link. */
    TopologyScreen > VerticalScroll {
        height: 1fr;
    }
    TopologyScreen #topo-matrix {
        padding: 0 1;
    }
    TopologyScreen #links-summary {
        height: auto;
        padding: 0 1;
        border-top: solid $foreground 30%;
    }
    TopologyScreen #links {
        height: auto;
        overflow-y: hidden;
    }
    """
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", show=True)]

    def __init__(self) -> None:
        super().__init__()
        self._topology: Topology | None = None
        self._matrix = Static(id="topo-matrix")
        self._summary = Static(id="links-summary")
        self._links: DataTable[Text] = DataTable(cursor_type="row", id="links")
        self._shown: dict[str, tuple[str, ...]] = {}
        self._first = True
        self._next_links = 0.0

    def compose(self) -> ComposeResult:
        yield Static(Content("Topology").stylize("bold $accent"), id="topo-title")
        with VerticalScroll():
            yield self._matrix
            yield self._summary
            yield self._links
        yield Footer()

    def on_mount(self) -> None:
        for label in LINK_COLUMNS:
            self._links.add_column(label, key=label)

    def apply_snapshot(self, snap: Snapshot) -> None:
        if self._first or snap.topology != self._topology:
            # The topology does not change while gputop runs: rendered once.
            self._first = False
            self._topology = snap.topology
            self._matrix.update(matrix_content(snap.topology, len(snap.devices)))
        now = time.monotonic()
        if now >= self._next_links:
            self._next_links = now + LINKS_EVERY
            self._summary.update(links_summary(snap.links))
            self._show_links(snap.links)

    def _show_links(self, links: Sequence[LinkSample]) -> None:
        table = self._links
        wanted = {lk.key: link_cells(lk) for lk in links}
        for key in [k for k in self._shown if k not in wanted]:
            table.remove_row(key)
            del self._shown[key]
        for key, cells in wanted.items():
            old = self._shown.get(key)
            if old is None:
                table.add_row(*(safe_text(c) for c in cells), key=key)
            elif old != cells:
                for col, new, was in zip(LINK_COLUMNS, cells, old):
                    if new != was:
                        table.update_cell(key, col, safe_text(new), update_width=True)
            self._shown[key] = cells
