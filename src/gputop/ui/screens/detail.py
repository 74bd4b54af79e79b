"""Every field of one GPU, grouped, each missing one with its reason in words, and its history
at a larger size. ← → (or [ ]) step through the GPUs; Esc goes back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop.model import THROTTLE, DeviceSample, Missing, Snapshot, value
from gputop.model.memory_split import memory_split
from gputop.model.xid import lookup as xid_lookup
from gputop.ui import memory
from gputop.ui.text import safe_content
from gputop.ui.view import format as fmt
from gputop.ui.view import styles
from gputop.ui.view.history import GpuHistory
from gputop.ui.view.status import CROSS, THROTTLE_BADGES, badges
from gputop.ui.widgets.history_graph import HistoryGraph
from gputop.ui.widgets.text_line import TextLine

Fmt = Callable[[Any], str]


def _yes_no(v: bool) -> str:
    return "yes" if v else "no"


def _pct(v: float) -> str:
    return f"{v:.0f} %"


def _temp(v: float) -> str:
    return f"{v:.0f} °C"


def _w(v: float) -> str:
    return f"{v:.0f} W"


def _mhz(v: float) -> str:
    return f"{v:.0f} MHz"


def _bytes(v: float) -> str:
    return f"{v / fmt.GiB:,.1f} GiB ({v / fmt.MiB:,.0f} MiB)"


def _rate(v: float) -> str:
    return f"{v / fmt.MiB:,.1f} MiB/s"


def _energy(v: float) -> str:
    return f"{v / 3.6e6:,.1f} kWh"


def _count(v: int) -> str:
    return f"{v:,}"


def _pstate(v: int) -> str:
    return f"P{v}"


def _throttle(v: tuple[str, ...]) -> str:
    if not v:
        return "none"
    return ", ".join(f"{r} ({THROTTLE_BADGES[r][0]})" if r in THROTTLE_BADGES else r for r in v)


GROUPS: tuple[tuple[str, tuple[tuple[str, str, Fmt], ...]], ...] = (
    ("Utilization", (
        ("GPU busy", "util_gpu", _pct),
        ("memory busy", "util_mem", _pct),
        ("engine active (GPM)", "gr_active", _pct),
        ("SM active (GPM)", "sm_active", _pct),
        ("SM occupancy (GPM)", "sm_occupancy", _pct),
        ("tensor active (GPM)", "tensor_active", _pct),
        ("DRAM active (GPM)", "dram_active", _pct),
        ("encoder", "enc_util", _pct),
        ("decoder", "dec_util", _pct),
    )),
    ("Memory", (
        ("total", "mem_total", _bytes),
        ("used by processes", "mem_used", _bytes),
        ("reserved by driver", "mem_reserved", _bytes),
        ("free", "mem_free", _bytes),
    )),
    ("Temperature", (
        ("GPU", "temp_gpu", _temp),
        ("memory (HBM)", "temp_mem", _temp),
        ("margin to slowdown", "temp_margin", _temp),
        ("max operating", "temp_max_operating", _temp),
        ("HW slowdown at", "temp_slowdown", _temp),
        ("shutdown at", "temp_shutdown", _temp),
        ("fan", "fan", _pct),
    )),
    ("Power", (
        ("draw", "power_draw", _w),
        ("enforced limit", "power_limit", _w),
        ("default limit", "power_default_limit", _w),
        ("energy since driver load", "energy_j", _energy),
        ("performance state", "pstate", _pstate),
    )),
    ("Clocks and throttling", (
        ("SM clock", "clock_sm", _mhz),
        ("SM clock max", "clock_sm_max", _mhz),
        ("memory clock", "clock_mem", _mhz),
        ("memory clock max", "clock_mem_max", _mhz),
        ("active reasons", "throttle", _throttle),
    )),
    ("PCIe", (
        ("generation", "pcie_gen", str),
        ("max generation", "pcie_gen_max", str),
        ("width", "pcie_width", lambda v: f"x{v}"),
        ("max width", "pcie_width_max", lambda v: f"x{v}"),
        ("receive", "pcie_rx", _rate),
        ("transmit", "pcie_tx", _rate),
        ("replays", "pcie_replays", _count),
    )),
    ("Health", (
        ("ECC enabled", "ecc_enabled", _yes_no),
        ("ECC corrected (volatile)", "ecc_corrected", _count),
        ("ECC uncorrected (volatile)", "ecc_uncorrected", _count),
        ("remapped rows, corrected", "remapped_corrected", _count),
        ("remapped rows, uncorrected", "remapped_uncorrected", _count),
        ("row remap pending", "remap_pending", _yes_no),
        ("row remap failed", "remap_failed", _yes_no),
    )),
    ("Device", (
        ("compute capability", "compute_capability", str),
        ("persistence mode", "persistence_mode", _yes_no),
        ("MIG mode", "mig_enabled", _yes_no),
        ("NUMA node", "numa_node", str),
        ("CPU affinity", "cpu_affinity", str),
    )),
)

LABEL_WIDTH = 27  # the throttle reasons' column
XID_LINES = 5  # the newest Xids listed under Health
XID_CHIP_S = 3600.0  # the title shows the latest Xid for an hour
_GLYPHS = {"critical": CROSS, "warning": "▲", "info": "●"}


def field_line(name: str, v: Any, f: Fmt, width: int = LABEL_WIDTH) -> Content:
    head = Content(f"{name:<{width}}").stylize(styles.LABEL)
    if isinstance(v, Missing):
        return head + safe_content(fmt.reason_words(v), "italic " + styles.MUTED)
    return head + safe_content(f(v))


def label_width(fields: tuple[tuple[str, str, Fmt], ...]) -> int:
    return max(len(n) for n, _, _ in fields) + 2


def group_content(d: DeviceSample, fields: tuple[tuple[str, str, Fmt], ...]) -> Content:
    width = label_width(fields)
    return Content("\n").join(field_line(n, getattr(d, a), f, width) for n, a, f in fields)


def xid_chip(d: DeviceSample, now: float) -> Content | None:
    """` ▲ XID 13 ` in the catalog's severity while the GPU's latest Xid is under an hour old."""
    if not d.xids or d.lost is not None or now - d.xids[-1].time > XID_CHIP_S:
        return None
    sev = xid_lookup(d.xids[-1].xid).severity
    return Content(f" {_GLYPHS[sev]} XID {d.xids[-1].xid} ").stylize(styles.badge_style(sev))


def xid_lines(d: DeviceSample, width: int) -> list[Content]:
    """The GPU's newest Xids, newest first, each with its time, severity and meaning; no line at
    all for a GPU that had none."""
    if not d.xids:
        return []
    lines = [field_line("Xid events", d.xid_count, lambda n: f"{n:,} since gputop started",
                        width)]
    for x in reversed(d.xids[-XID_LINES:]):
        info = xid_lookup(x.xid)
        sev = info.severity
        lines.append(Content.assemble(
            (f"{fmt.clock_time(x.time):<{width}}", styles.LABEL),
            (f" {_GLYPHS[sev]} Xid {x.xid} ", styles.badge_style(sev)), " ",
            info.description if info.known else "see NVIDIA's Xid catalog"))
    return lines


def throttle_time_content(d: DeviceSample, prev: Mapping[str, float] | None,
                          dt: float) -> Content:
    tt = d.throttle_time
    if isinstance(tt, Missing):
        return field_line("time per reason", tt, str)
    lines = []
    for reason in [r for r in THROTTLE if r in tt] + [r for r in tt if r not in THROTTLE]:
        secs = float(tt[reason])
        share = ""
        if prev is not None and reason in prev and dt > 0:
            share = f"  ({max(0.0, secs - prev[reason]) / dt:.0%} of the last tick)"
        lines.append(Content.assemble((f"{reason:<{LABEL_WIDTH}}", styles.LABEL),
                                      f"{secs:,.1f} s", (share, styles.LABEL)))
    return Content("\n").join(lines) if lines else Content("no counters").stylize(styles.LABEL)


def identity_content(d: DeviceSample, snap: Snapshot) -> Content:
    procs = snap.processes_on(d.index)
    width = 11
    lines = [
        Content.assemble((f"{'name':<{width}}", styles.LABEL), safe_content(d.name)),
        Content.assemble((f"{'vendor':<{width}}", styles.LABEL), safe_content(d.vendor)),
        Content.assemble((f"{'UUID':<{width}}", styles.LABEL), safe_content(d.uuid)),
        Content.assemble((f"{'PCI bus':<{width}}", styles.LABEL), safe_content(d.pci_bus_id)),
        Content.assemble((f"{'processes':<{width}}", styles.LABEL), str(len(procs))),
    ]
    for m in d.mig_devices:
        mem = (f"{fmt.label(m.mem_used, fmt.size)}/{fmt.label(m.mem_total, fmt.size)}")
        lines.append(Content.assemble(
            (f"{f'MIG {m.gpu_instance}.{m.compute_instance}':<{width}}", styles.LABEL),
            safe_content(fmt.label(m.name)), f"  {mem}",
            f"  SM {fmt.label(m.sm_active, fmt.percent)}"))
    return Content("\n").join(lines)


def memory_split_lines(d: DeviceSample, snap: Snapshot, width: int) -> list[Content]:
    """Where the GPU's used memory goes, from the in-process probe, then each process: with a
    probe its own parts, without one NVML's figure. Labels `width` wide, as the fields above."""
    split = memory_split(snap, d.index)
    room = max(20, 56 - width)  # a column of the grid at 120 columns

    def line(label: str, content: Content) -> Content:
        return Content(f"{label:<{width}}").stylize(styles.LABEL) + content

    if split is None:
        return [line("by the probe", Content("no process here runs it (python -m gputop.probe)")
                     .stylize("italic " + styles.MUTED))]
    lines = [line("by the probe", memory.legend(split, room))]
    by_pid = {pm.pid: pm for pm in split.processes}
    for p in sorted(snap.processes_on(d.index), key=lambda p: -(value(p.gpu_mem) or 0)):
        pm = by_pid.get(p.pid)
        lines.append(line(f"PID {p.pid}", memory.process_legend(pm, room) if pm is not None else
                          Content(f"{fmt.label(p.gpu_mem, fmt.size)}, no probe")
                          .stylize(styles.LABEL)))
    lines += [safe_content(note, styles.LABEL) for note in split.notes]
    return lines


def title_content(d: DeviceSample, now: float | None = None) -> Content:
    chips = [Content(f" {b.text} ").stylize(styles.badge_style(b.severity)) for b in badges(d)]
    xid = xid_chip(d, now) if now is not None else None
    if xid is not None:
        chips.append(xid)
    parts: list[Content] = [Content.assemble((f"GPU {d.index}", "bold $accent"), "  ",
                                             safe_content(d.name, "bold"))]
    if d.lost is not None:
        parts.append(Content(fmt.reason_words(d.lost)).stylize(styles.text_style("critical")))
    parts.extend(chips)
    return Content("  ").join(parts)


class DetailScreen(Screen[None]):
    DEFAULT_CSS = """
    DetailScreen > #detail-title {
        background: $panel;
        padding: 0 1;
    }
    DetailScreen > #detail-graphs {
        height: 4;
        padding: 0 1;
    }
    DetailScreen .graph-box {
        width: 1fr;
        height: 4;
        margin-right: 1;
    }
    DetailScreen .graph-box > HistoryGraph {
        height: 3;
        width: 1fr;
    }
    DetailScreen .graph-box > TextLine {
        color: $foreground-muted;
    }
    DetailScreen .util-graph { color: $text-primary; }
    DetailScreen .mem-graph { color: $text-success; }
    DetailScreen .power-graph { color: $text-secondary; }
    DetailScreen > VerticalScroll {
        height: 1fr;
    }
    DetailScreen Grid {
        grid-size: 2;
        grid-gutter: 0 2;
        height: auto;
        padding: 0 1;
    }
    DetailScreen.-narrow Grid {
        grid-size: 1;
    }
    DetailScreen .group {
        height: auto;
        border-top: solid $foreground 30%;
        border-title-align: left;
        border-title-color: $accent;
    }
    """
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", show=True),
        Binding("left,left_square_bracket", "step(-1)", "Prev GPU", show=True),
        Binding("right,right_square_bracket", "step(1)", "Next GPU", show=True),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]

    def __init__(self, index: int, histories: Mapping[int, GpuHistory]) -> None:
        super().__init__()
        self.index = index
        self._histories = histories
        self._snapshot: Snapshot | None = None
        self._prev: tuple[float, Mapping[str, float]] | None = None
        self._title = TextLine(id="detail-title")
        h = histories.get(index) or GpuHistory()
        self._graphs = {
            "util": HistoryGraph(h.util, maximum=100.0, classes="util-graph"),
            "mem": HistoryGraph(h.mem, maximum=1.0, classes="mem-graph"),
            "power": HistoryGraph(h.power, maximum=1.0, classes="power-graph"),
        }
        self._graph_labels = {k: TextLine() for k in self._graphs}
        names = ("Identity", *(g for g, _ in GROUPS), "Throttle time (cumulative)")
        self._groups = {name: Static(classes="group") for name in names}
        for name, widget in self._groups.items():
            widget.border_title = name

    def compose(self) -> ComposeResult:
        yield self._title
        with Horizontal(id="detail-graphs"):
            for key, graph in self._graphs.items():
                with Vertical(classes="graph-box"):
                    yield self._graph_labels[key]
                    yield graph
        with VerticalScroll(), Grid():
            yield from self._groups.values()
        yield Footer()

    def apply_snapshot(self, snap: Snapshot) -> None:
        prev_snap = self._snapshot
        self._snapshot = snap
        d = snap.device(self.index)
        if d is None:
            self._title.set(Content(f"GPU {self.index} is not in the latest snapshot")
                            .stylize(styles.text_style("warning")))
            return
        self._title.set(title_content(d, snap.time))
        self._update_graphs(d)
        self._groups["Identity"].update(identity_content(d, snap))
        for name, fields in GROUPS:
            content = group_content(d, fields)
            if name == "Memory":
                content = Content("\n").join(
                    [content, *memory_split_lines(d, snap, label_width(fields))])
            elif name == "Health" and d.xids:
                content = Content("\n").join([content, *xid_lines(d, label_width(fields))])
            self._groups[name].update(content)
        prev_tt = None
        dt = 0.0
        if prev_snap is not None and self._prev is not None:
            dt = snap.time - self._prev[0]
            prev_tt = self._prev[1]
        self._groups["Throttle time (cumulative)"].update(throttle_time_content(d, prev_tt, dt))
        tt = d.throttle_time
        self._prev = (snap.time, dict(tt)) if not isinstance(tt, Missing) else None

    def _update_graphs(self, d: DeviceSample) -> None:
        total, limit = value(d.mem_total), value(d.power_limit)
        if total:
            self._graphs["mem"].maximum = float(total)
        if limit:
            self._graphs["power"].maximum = float(limit)
        labels = {
            "util": f"GPU busy {fmt.label(d.util_gpu, fmt.percent)}",
            "mem": (f"memory {fmt.label(d.mem_used, fmt.size)} of "
                    f"{fmt.label(d.mem_total, fmt.size)}"),
            "power": (f"power {fmt.label(d.power_draw, fmt.watts)} of "
                      f"{fmt.label(d.power_limit, fmt.watts)}"),
        }
        for key, graph in self._graphs.items():
            self._graph_labels[key].set(Content(labels[key]))
            graph.refresh()

    def action_step(self, delta: int) -> None:
        if self._snapshot is None:
            return
        indices = [d.index for d in self._snapshot.devices]
        if self.index not in indices:
            return
        pos = (indices.index(self.index) + delta) % len(indices)
        self.index = indices[pos]
        h = self._histories.get(self.index) or GpuHistory()
        for key, values in (("util", h.util), ("mem", h.mem), ("power", h.power)):
            self._graphs[key].values = values
        self._prev = None
        self.apply_snapshot(self._snapshot)
