"""The live dashboard, as a user meets it: every key and view through Pilot, and the pure pieces
(safe text, fixed-scale history, badges, the process rows, killing) without an app.

Data comes from small synthetic Snapshots built here (one precise situation each) and, where a
realistic node matters, from the bundled demo recording."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from rich.text import Text
from textual.app import App
from textual.strip import Strip

from gputop.feeds.playback import RecordingFeed, demo_path
from gputop.model import (
    DeviceSample,
    Missing,
    Snapshot,
)
from gputop.recording import read_recording
from gputop.testing.synthetic import h100
from gputop.ui import textual_private
from gputop.ui.app import GputopApp
from gputop.ui.render import changed_spans
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.screens.help import HelpScreen
from gputop.ui.screens.kill import KillScreen
from gputop.ui.screens.topology import TopologyScreen
from gputop.ui.text import safe_content, safe_text, sanitize
from gputop.ui.view import format as fmt
from gputop.ui.view.history import GpuHistory
from gputop.ui.view.keys import OTHER_KEYS
from gputop.ui.view.kill import KillPolicy, Terminator
from gputop.ui.view.process_rows import build_rows, matches, sort_processes
from gputop.ui.view.status import badges, pcie_downtrained
from gputop.ui.widgets.gpu_card import GpuCard
from gputop.ui.widgets.gpu_row import GpuRow, row_content
from gputop.ui.widgets.history_graph import GAP, HistoryGraph, gap_runs, graph_line
from gputop.ui.widgets.process_table import ProcessTable
from tests.helpers.ui import (
    T0,
    Clock,
    footer_text,
    frozen,
    make_app,
    node,
    pids,
    process,
    repainted,
    screen_text,
    series,
    show,
    table,
    troubled,
)
from tests.helpers.waiting import until, within

pytestmark = pytest.mark.usefixtures("utc")


# ---------------------------------------------------------------------------------------------
# Untrusted text


def test_control_characters_become_visible_escapes() -> None:
    assert sanitize("\x1b]0;owned\x07rm -rf\r") == "\\x1b]0;owned\\x07rm -rf\\r"
    assert "\x1b" not in safe_text("\x1b[2J").plain
    assert safe_text("evil\u202egnp.exe").plain == "evil\\u202egnp.exe"


def test_markup_in_a_process_name_is_shown_as_typed() -> None:
    text = safe_text("[bold red]root[/] [link=http://x]y")
    assert isinstance(text, Text)
    assert text.plain == "[bold red]root[/] [link=http://x]y"
    assert text.spans == []
    assert safe_content("[b]x[/b]").plain == "[b]x[/b]"


def test_a_command_shows_its_program_and_argv_zero_whole() -> None:
    # argv[0] is the process's own word: a slash in it is no directory, and a program that
    # calls itself something else is named first.
    assert fmt.command(("[red]x[/red]", "1000"), "sleep") == "sleep: [red]x[/red] 1000"
    assert fmt.command(("sshd: root@pts/0",), "sleep") == "sleep: sshd: root@pts/0"
    assert fmt.command(("/usr/bin/python3", "train.py"), "python3") == "python3 train.py"
    assert fmt.command(("/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc=8"),
                       "torchrun") == "python3 /usr/local/bin/torchrun --nproc=8"
    assert fmt.command(("/opt/conda/bin/python3.11", "-u"), "python3.11") == "python3.11 -u"
    assert fmt.command(("/usr/local/bin/a-very-long-program-name",),
                       "a-very-long-pro") == "a-very-long-program-name"
    assert fmt.command(("python",), Missing("no_permission")) == "python"


def test_huge_command_lines_are_cut() -> None:
    assert len(safe_text("x" * 100_000).plain) == 1000
    assert safe_text("x" * 100_000).plain.endswith("…")


# ---------------------------------------------------------------------------------------------
# Fixed-scale history, without an app


def test_history_keeps_a_fixed_scale() -> None:
    # 3 % jitter near the bottom stays near the bottom (an autoscaling sparkline would fill it).
    assert graph_line([1.0, 3.0, 2.0], 0, 3, 1, 100.0) == "▁▁▁"
    assert graph_line([0.0, 50.0, 100.0], 0, 3, 1, 100.0) == " ▄█"
    # Newest at the right; a short history leaves the left empty.
    assert graph_line([100.0], 0, 4, 1, 100.0) == "   █"


def test_history_shows_gaps_for_missing_ticks() -> None:
    assert graph_line([100.0, None, 100.0], 0, 3, 1, 100.0) == f"█{GAP}█"


def test_a_history_line_is_drawn_in_one_run_per_stretch_of_values_or_gaps() -> None:
    assert gap_runs("") == []
    assert gap_runs("  ▁▄█") == ["  ▁▄█"]
    assert gap_runs(f"█{GAP}{GAP}▄ ") == ["█", f"{GAP}{GAP}", "▄ "]
    assert gap_runs(f"{GAP}█") == [GAP, "█"]


def test_history_graph_widget_draws_rows_without_an_app() -> None:
    graph = HistoryGraph(maximum=100.0)
    for v in (0.0, 25.0, 50.0, 100.0):
        graph.add_value(v)
    assert [graph.line_text(y, 4, 2) for y in range(2)] == ["   █", " ▄██"]
    graph.maximum = 200.0  # the scale follows the device (memory total, power limit)
    assert graph.line_text(0, 4, 1) == " ▁▂▄"


def test_history_store_records_gaps_for_a_lost_gpu() -> None:
    h = GpuHistory(maxlen=3)
    h.push(h100(0, util_gpu=50.0))
    h.push(h100(0, lost=Missing("gpu_lost")))
    h.push(h100(0, util_gpu=Missing("unsupported")))
    h.push(h100(0, util_gpu=70.0))
    assert list(h.util) == [None, None, 70.0]
    assert h.ticks == 4


def test_only_the_changed_cells_of_a_line_are_repainted() -> None:
    from rich.segment import Segment
    from rich.style import Style

    assert textual_private.install()  # separate runs are sent separately (see the module)
    a = Strip([Segment("GPU "), Segment("97%"), Segment(" ███")])
    b = Strip([Segment("GPU "), Segment("98%"), Segment(" ███")])
    assert changed_spans(a, b) == [(5, 6)]
    assert changed_spans(a, a) == []
    assert changed_spans(None, a) == [(0, 11)]
    # Two changes far apart are two runs; close together, or in one run of a style, one.
    def line(util: str, power: str) -> Strip:
        return Strip([Segment(f"GPU  {util}"), Segment(" ▕████▏ ", Style(dim=True)),
                      Segment(f"{power}/700W")])

    assert changed_spans(line("97%", "612"), line("98%", "613")) == [(6, 7), (18, 19)]
    assert changed_spans(line("97%", "612"), line("88%", "612")) == [(5, 7)]
    plain = Strip([Segment("GPU  97% ▕████▏ 612/700W")])
    both = Strip([Segment("GPU  98% ▕████▏ 613/700W")])
    assert changed_spans(plain, both) == [(6, 19)]
    # A style change counts, text or not; a character two cells wide makes it the whole line.
    bold = Strip([Segment("GPU "), Segment("97%", Style(bold=True)), Segment(" ███")])
    assert changed_spans(a, bold) == [(4, 7)]
    wide = Strip([Segment("GPU "), Segment("漢%"), Segment(" ███")])
    assert changed_spans(a, wide) == [(0, 11)]


# ---------------------------------------------------------------------------------------------
# Badges: a word for every state


def test_power_cap_is_information_and_idle_is_not_throttling() -> None:
    assert [(b.text, b.severity) for b in badges(h100(0, throttle=("sw_power_cap",)))] == [
        ("PWR CAP", "info")]
    assert badges(h100(0, throttle=("gpu_idle",))) == []


def test_thermal_and_hardware_slowdowns_are_warnings_or_worse() -> None:
    found = badges(h100(0, throttle=("sw_thermal", "hw_slowdown"), temp_margin=2.0))
    assert [b.text for b in found][:2] == ["▲ HW SLOWDOWN", "▲ HOT"]
    assert {b.severity for b in found} == {"critical", "warning"}


def test_a_lost_gpu_says_so() -> None:
    assert [b.text for b in badges(h100(0, lost=Missing("gpu_lost")))] == ["\u00d7 LOST"]


def test_a_downtrained_link_counts_only_under_load() -> None:
    assert pcie_downtrained(h100(0, util_gpu=95.0, pcie_gen=4))
    assert not pcie_downtrained(h100(0, util_gpu=3.0, pcie_gen=1))  # idle links downshift


# ---------------------------------------------------------------------------------------------
# Process rows: filter, sort, workers


def test_filter_words_user_and_gpu() -> None:
    snap = node()
    alice = next(p for p in snap.processes if p.user == "alice")
    assert matches(alice, "ipykernel")
    assert matches(alice, "user:ali gpu:7")
    assert not matches(alice, "user:mlteam")
    assert not matches(alice, "gpu:3")
    assert matches(alice, "docker")  # the container label


def test_sort_by_any_column_keeps_workers_under_their_process() -> None:
    snap = node()
    rows = build_rows(snap, sort="cpu", reverse=True, expanded={"0:2210431"})
    assert rows[0].key == "0:2210431"
    assert [r.child is not None for r in rows[1:7]] == [True] * 6
    by_mem = [p.pid for p in sort_processes(snap.processes, "gmem", True, T0)]
    assert by_mem[0] == 2210438 and by_mem[-1] == 1187334


def test_missing_values_sort_last_both_ways() -> None:
    procs = [process(1, 0, cpu=Missing("not_visible")), process(2, 0, cpu=5.0),
             process(3, 0, cpu=50.0)]
    assert [p.pid for p in sort_processes(procs, "cpu", False, T0)] == [2, 3, 1]
    assert [p.pid for p in sort_processes(procs, "cpu", True, T0)] == [3, 2, 1]


# ---------------------------------------------------------------------------------------------
# Killing, without an app


@dataclass
class FakeProcesses:
    """Stands in for os.kill: records signals; a process exits on the signals it honours."""

    exits_on: tuple[int, ...] = (signal.SIGTERM,)
    sent: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    dead: set[int] = dataclasses.field(default_factory=set)

    def kill(self, pid: int, sig: int) -> None:
        if pid in self.dead:
            raise ProcessLookupError(pid)
        self.sent.append((pid, sig))
        if sig in self.exits_on or sig == signal.SIGKILL:
            self.dead.add(pid)

    def alive(self, pid: int) -> bool:
        return pid not in self.dead


def terminator(fake: FakeProcesses, grace: float = 0.05) -> Terminator:
    return Terminator(signal_fn=fake.kill, alive=fake.alive, started=lambda pid: None,
                      grace=grace, poll=0.01)


def test_only_own_processes_may_be_killed() -> None:
    mine, theirs = process(1, 0, user="mlteam"), process(2, 0, user="bob")
    hidden = process(3, 0, user=Missing("not_visible"))
    me = KillPolicy(euid=1000, username="mlteam")
    assert me.refusal(mine) is None
    assert "belongs to bob" in (me.refusal(theirs) or "")
    assert "another PID namespace" in (me.refusal(hidden) or "")
    root = KillPolicy(euid=0, username="root")
    assert root.refusal(theirs) is None
    assert root.refusal(hidden) is not None  # never, not even as root
    assert "read-only" in (KillPolicy(0, "root", readonly=True).refusal(mine) or "")


async def test_term_then_kill_after_the_grace_period() -> None:
    stubborn = FakeProcesses(exits_on=())
    assert await terminator(stubborn).terminate(process(42, 0)) == "killed"
    assert stubborn.sent == [(42, signal.SIGTERM), (42, signal.SIGKILL)]
    polite = FakeProcesses()
    assert await terminator(polite).terminate(process(43, 0)) == "exited"
    assert polite.sent == [(43, signal.SIGTERM)]


async def test_a_reused_pid_is_never_signalled() -> None:
    fake = FakeProcesses()
    t = Terminator(signal_fn=fake.kill, alive=fake.alive, started=lambda pid: T0 + 999.0)
    assert await t.terminate(process(44, 0, started=T0)) == "reused"
    assert fake.sent == []


# ---------------------------------------------------------------------------------------------
# The dashboard


async def test_eight_gpus_fit_on_one_line_each_at_80x24() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, series(5))
        rows = list(app.query(GpuRow))
        assert len(rows) == 8 and all(r.display for r in rows)
        assert not any(c.region.height for c in app.query(GpuCard))
        text = screen_text(app)
        assert "  0 H100 " in text and "PWR CAP" in text
        assert table(app).size.height >= 5  # a few process rows still fit
        assert "dgx-h100-07" in text and "driver 580.159.04" in text and "CUDA 13.0" in text


async def test_cards_at_120x40_and_sixteen_gpus_fall_back_to_lines() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(5))
        assert app.dashboard.gpus.mode == "cards"
        assert all(c.region.height == 7 for c in app.query(GpuCard))
        await pilot.resize_terminal(80, 24)
        assert app.dashboard.gpus.mode == "compact"
        await pilot.resize_terminal(120, 40)
        assert app.dashboard.gpus.mode == "cards"
        await show(app, pilot, [node(6, n_gpus=16)])
        assert app.dashboard.gpus.mode == "compact"
        assert len(app.query(GpuRow)) == 16
        assert all(r.region.height == 1 for r in app.query(GpuRow))


async def test_sixteen_gpus_fit_at_80x24() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, [node(0, n_gpus=16)])
        rows = list(app.query(GpuRow))
        assert len(rows) == 16
        assert max(r.region.bottom for r in rows) < 24 - 3  # the process header and a row too


async def test_layout_key_cycles_auto_lines_cards() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(3))
        assert app.dashboard.gpus.mode == "cards"
        await pilot.press("v")
        assert app.dashboard.gpus.mode == "compact"
        await pilot.press("v")
        assert app.dashboard.gpus.mode == "cards"
        await pilot.press("v")
        assert app.dashboard.layout_override is None


async def test_stale_and_stuck_data_are_named_not_hidden() -> None:
    clock = Clock(T0 + 0.4, follow=False)
    app = make_app(clock=clock)
    async with app.run_test(size=(100, 24)) as pilot:
        await show(app, pilot, [node(0)])
        header = app.dashboard.header
        assert "● live" in header.content.plain
        clock.t = T0 + 12
        header.tick()
        assert "STALE" in header.content.plain and "data 12 s old" in header.content.plain
        clock.t = T0 + 300
        header.tick()
        assert "STUCK" in header.content.plain and "data 5 min old" in header.content.plain
        # The time shown is the data's own, so a stuck poll cannot hide behind a ticking clock.
        assert "08:00:00" in header.content.plain


async def test_warnings_show_in_a_line_and_go_away() -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot, [node(0, warnings=("poll took 4.2 s",))])
        bar = app.dashboard.warnings
        assert bar.display and bar.region.height == 1
        assert "poll took 4.2 s" in bar.content.plain
        await show(app, pilot, [node(1)])
        assert bar.region.height == 0


@dataclass
class Finding:
    severity: str
    title: str
    detail: str


async def test_findings_panel_appears_only_with_findings() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        panel = app.dashboard.findings
        assert panel.region.height == 0
        app.set_findings([Finding("info", "power-limited at 700 W", "normal for dense math"),
                          Finding("critical", "GPU 3 thermal slowdown", "clocks 990/1980 MHz")])
        await pilot.pause()
        assert panel.region.height > 0
        text = screen_text(app)
        assert "Findings (2)" in text
        assert text.index("GPU 3 thermal slowdown") < text.index("power-limited")  # worst first
        app.set_findings([])
        await pilot.pause()
        assert panel.region.height == 0


async def test_sixty_four_gpus_leave_room_for_the_findings_and_processes() -> None:
    findings = [Finding("warning", f"finding {i}", "detail") for i in range(6)]
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await show(app, pilot, [node(0, n_gpus=64, links=False)])
        app.set_findings(findings)
        await pilot.pause()
        text = screen_text(app)
        lines = text.splitlines()
        # The GPUs scroll in what the Findings and a few processes leave them.
        assert "PROCESSES 65" in text and "finding 4" in text
        header = next(i for i, line in enumerate(lines) if "PID USER" in line)
        assert "2210431" in lines[header + 1]
        assert "Findings (6) 1 more below: Tab here, ↑ ↓" in text and "finding 5" not in text
        # Every GPU is reachable by keys: the lines scroll to the selection.
        await pilot.press("tab")
        assert app.dashboard.gpus.has_focus
        await pilot.press(*["down"] * 63)
        await pilot.pause()
        assert app.dashboard.gpus.selected == 63
        assert re.search(r"^ +63 H100", screen_text(app), re.M)
        # So are all the Findings.
        await pilot.press("tab")
        assert app.dashboard.findings.has_focus
        await pilot.press("down", "down")
        await pilot.pause()
        text = screen_text(app)
        assert "finding 5" in text and "finding 0" not in text
        assert "Findings (6) 1 above: Tab here, ↑ ↓" in text


async def test_a_finding_whose_figure_moves_repaints_without_a_layout() -> None:
    """Starvation findings say "47.2 % of step time" and the figure moves every tick: the
    panel repaints, the screen is not laid out again (its height is one line a finding)."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        panel = app.dashboard.findings
        app.set_findings([Finding("warning", "GPU0 starved", "47.2 % of step time waiting")])
        await pilot.pause()
        layouts: list[bool] = []
        original = panel.refresh

        def spy(*regions: Any, layout: bool = False, **kw: Any) -> Any:
            layouts.append(layout)
            return original(*regions, layout=layout, **kw)

        panel.refresh = spy  # type: ignore[method-assign]
        app.set_findings([Finding("warning", "GPU0 starved", "47.9 % of step time waiting")])
        await pilot.pause()
        assert "47.9 %" in screen_text(app) and layouts and not any(layouts)
        app.set_findings([Finding("warning", "GPU0 starved", "48.1 % of step time waiting"),
                          Finding("warning", "GPU1 starved", "47.0 % of step time waiting")])
        await pilot.pause()
        assert any(layouts) and "Findings (2)" in screen_text(app)


async def test_troubled_gpus_carry_words_not_only_colours() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [*series(5), troubled(5)])
        cards = {c.index: c for c in app.query(GpuCard)}
        assert "▲ HOT" in str(cards[3].border_title) and "THERMAL" in str(cards[3].border_title)
        assert cards[3].has_class("-critical")
        assert "LOST" in str(cards[5].border_title)
        assert "▲ REMAP" in str(cards[2].border_title)
        assert "▼ PCIe" in str(cards[6].border_title)
        text = screen_text(app)
        assert "the GPU fell off the bus since 08:00:20" in text
        assert "▼ 4x8 of 5x16" in text
        assert "1°C to slowdown" in text
        assert "GPU 5 fell off the bus (Xid 79)" in text  # the warnings line


async def test_compact_rows_show_lost_and_hot() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, [troubled(0)])
        rows = {r.index: r.content.plain for r in app.query(GpuRow)}
        assert "LOST" in rows[5] and "fell off the bus" in rows[5]
        assert "▲ HOT" in rows[3] and "86°C" in rows[3]
        assert "PWR CAP" in rows[0]


async def test_only_changed_card_lines_are_repainted() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        flat = series(40, util=lambda g, t: 99.0)  # a steady node: nothing moves
        await show(app, pilot, flat[:39])
        card = next(c for c in app.query(GpuCard) if c.index == 0)
        with repainted(card) as painted:
            app.apply_snapshot(dataclasses.replace(flat[39], time=T0 + 39))
            assert painted == []  # same numbers, flat history: not a cell repainted
            changed = node(40, util=lambda g, t: 99.0,
                           devices={0: {"power_draw": 650.0}})
            app.apply_snapshot(changed)
        assert painted and all(r.height == 1 and r.width < card.size.width for r in painted)


async def test_process_table_columns_and_literal_untrusted_text() -> None:
    evil = process(666, 0, user="[b]root", name="x",
                   cmdline=("\x1b]0;pwned\x07python", "[red]x[/red]"))
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0, processes=(evil,))])
        text = screen_text(app)
        for label in ("GPU", "PID", "USER", "JOB", "GPU MEM", "SM%", "CPU%", "RSS", "TIME",
                      "COMMAND"):
            assert label in text
        assert "[b]root" in text
        assert "\\x1b]0;pwned\\x07python [red]x[/red]" in text
        assert "slurm:48213" in text and "1h00m" in text


async def test_a_disguised_process_shows_its_program_in_the_table_and_the_kill_dialog() -> None:
    disguised = process(4242, 0, name="sleep", cmdline=("[red]x[/red]", "1000"))
    app = make_app(kill_policy=KillPolicy(1000, "mlteam"), terminator=terminator(FakeProcesses()))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0, processes=(disguised,))])
        assert "sleep: [red]x[/red] 1000" in screen_text(app)
        await pilot.press("k")
        text = screen_text(app)
        assert re.search(r"program +sleep", text)
        assert re.search(r"command +\[red\]x\[/red\] 1000", text)


async def test_process_table_repaints_only_the_cells_that_changed() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        t = table(app)
        with repainted(t) as regions:
            procs = list(node(0).processes)
            procs[3] = dataclasses.replace(procs[3], cpu_percent=250.0)
            app.apply_snapshot(node(0, processes=tuple(procs)))
        # Row 3 is line 4 under the header; of it, only the CPU % cells.
        assert [(r.y, r.height) for r in regions] == [(4, 1)]
        assert regions[0].width <= 5


async def test_sort_keys_and_header_clicks() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        assert pids(app)[0] == "0:2210431"
        await pilot.press("s")  # PID, ascending
        assert app.dashboard.sort_column == "pid"
        assert pids(app)[0] == "7:1187334"
        await pilot.press("r")
        assert pids(app)[0] == "7:2210438"
        await pilot.press("s", "s", "s")  # user, job, GPU memory (largest first)
        assert app.dashboard.sort_column == "gmem" and app.dashboard.sort_reverse
        assert pids(app)[-1] == "7:1187334"
        assert "GPU MEM▼" in screen_text(app)
        await pilot.press("S")
        assert app.dashboard.sort_column == "job"
        await pilot.click(ProcessTable, offset=(2, 0))  # the GPU header
        assert app.dashboard.sort_column == "gpu"
        await pilot.click(ProcessTable, offset=(2, 0))
        assert app.dashboard.sort_reverse


async def test_filter_by_text_user_and_gpu() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("slash")
        assert app.dashboard.filter_input.has_focus
        await pilot.press(*"alice")
        assert pids(app) == ["7:1187334"]
        assert "1 match alice" in app.dashboard.proc_status.content.plain
        await pilot.press("escape")
        assert len(pids(app)) == 9 and not app.dashboard.filter_input.display
        await pilot.press("slash", *"gpu:3", "enter")
        assert pids(app) == ["3:2210434"]
        assert table(app).has_focus  # Enter keeps the filter and goes back to the table
        await pilot.press("slash", "ctrl+u", *"user:ml")
        assert len(pids(app)) == 8


async def test_expand_a_process_to_its_dataloader_workers() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("e")
        keys = pids(app)
        assert keys[1:7] == [f"0:2210431/{22104310 + k}" for k in range(6)]
        text = screen_text(app)
        assert "pt_data_worker" in text and "▼ 2210431" in text
        await pilot.press("down", "e")  # on a worker: folds its process
        assert len(pids(app)) == 9
        await pilot.press("enter")
        assert len(pids(app)) == 15
        await pilot.press("enter")
        assert len(pids(app)) == 9
        await pilot.press("end", "e")  # the notebook has no workers: said, nothing opens
        assert "has no worker processes" in app.messages[-1]


async def test_kill_asks_then_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeProcesses()
    app = make_app(kill_policy=KillPolicy(1000, "mlteam"), terminator=terminator(fake))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("k")
        assert isinstance(app.screen, KillScreen)
        assert "Kill PID 2210431 on GPU 0 (user mlteam)?" in screen_text(app)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert fake.sent == [(2210431, signal.SIGTERM)]
        assert "PID 2210431 exited" in app.messages[-1]


async def test_kill_escalates_to_sigkill() -> None:
    fake = FakeProcesses(exits_on=())
    app = make_app(kill_policy=KillPolicy(1000, "mlteam"), terminator=terminator(fake))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("down", "k")
        await pilot.click("#kill-yes")
        await app.workers.wait_for_complete()
        assert fake.sent == [(2210432, signal.SIGTERM), (2210432, signal.SIGKILL)]
        assert "sent SIGKILL" in app.messages[-1]


async def test_kill_can_be_cancelled_and_enter_alone_keeps_the_process() -> None:
    fake = FakeProcesses()
    app = make_app(kill_policy=KillPolicy(1000, "mlteam"), terminator=terminator(fake))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("k", "enter")  # the focused button is "Keep"
        assert not isinstance(app.screen, KillScreen)
        await pilot.press("k", "n")
        await pilot.press("k", "escape")
        await pilot.pause()
        assert fake.sent == []
        assert "left running" in app.messages[-1]


async def test_kill_refuses_other_users_hidden_pids_and_readonly() -> None:
    fake = FakeProcesses()
    hidden = process(9999999, 7, user=Missing("not_visible"), cmdline=Missing("not_visible"),
                     name=Missing("not_visible"))
    app = make_app(kill_policy=KillPolicy(1000, "bob"), terminator=terminator(fake))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0, processes=(*node(0).processes, hidden))])
        await pilot.press("k")
        assert not isinstance(app.screen, KillScreen)
        assert "belongs to mlteam" in app.messages[-1]
        await pilot.press("end", "k")
        assert "another PID namespace" in app.messages[-1]
        assert "(other PID namespace)" in screen_text(app)
    ro = make_app(readonly=True, terminator=terminator(fake))
    async with ro.run_test(size=(120, 40)) as pilot:
        await show(ro, pilot, [node(0)])
        await within(until(lambda: "Quit" in footer_text(ro)))  # the footer is drawn
        assert "Kill" not in footer_text(ro)  # not offered, and k says why
        await pilot.press("k")
        assert not isinstance(ro.screen, KillScreen)
        assert "read-only" in ro.messages[-1]
    assert fake.sent == []
    rw = make_app(terminator=terminator(fake))
    async with rw.run_test(size=(120, 40)) as pilot:
        await show(rw, pilot, [node(0)])
        await within(until(lambda: "Quit" in footer_text(rw)))
        assert "k Kill" in footer_text(rw)


async def test_kill_a_real_child_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = KillPolicy.for_current_user()

        def alive(pid: int) -> bool:
            return child.poll() is None  # reaps the child, so it is not left a zombie

        app = make_app(kill_policy=me,
                       terminator=Terminator(alive=alive, started=lambda pid: None, grace=5.0))
        target = process(child.pid, 0, user=me.username)
        async with app.run_test(size=(120, 40)) as pilot:
            await show(app, pilot, [node(0, processes=(target,))])
            await pilot.press("k", "y")
            await app.workers.wait_for_complete()
        assert child.wait(5) == -signal.SIGTERM
        assert f"PID {child.pid} exited" in app.messages[-1]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


async def test_help_lists_every_key() -> None:
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        for key in ("q", "?", "/", "s", "S", "r", "e", "k", "d", "t", "v", "Tab", "Esc"):
            assert re.search(rf"│ {re.escape(key)} +\w", text), key
        assert "PWR CAP" in text and "normal under full load" in text
        await pilot.press("escape")
        assert app.screen is app.dashboard


@pytest.mark.parametrize("size", [(80, 24), (40, 10)])
async def test_help_wraps_instead_of_cutting(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("question_mark")
        await pilot.pause()
        help_text = app.screen.query_one("#help-text")
        lines = str(help_text.render()).splitlines()
        box = help_text.content_region
        assert all(len(line.rstrip()) <= box.width for line in lines)
        words = " ".join(" ".join(lines).split())
        for _, text in OTHER_KEYS:
            assert text in words  # every description whole, if on two lines
        if size == (80, 24):
            assert re.search(r"click a +│\S*\n +│ +header to sort", screen_text(app))


async def test_a_terminal_too_small_says_so() -> None:
    app = make_app()
    async with app.run_test(size=(40, 10)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.pause()
        text = screen_text(app)
        assert "Terminal too small" in text and "40x10: gputop needs 60x15" in text
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        text = screen_text(app)
        assert "too small" not in text and "PROCESSES 9" in text


async def test_topology_view_shows_the_matrix_and_every_link() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, TopologyScreen)
        text = screen_text(app)
        assert "GPU0   X     NV18" in text
        assert "52-103" in text and "NUMA" in text
        assert "18/18 up" in text
        assert "▲ 3" in text  # GPU 6's replay errors, in the per-GPU summary
        links = app.screen.query_one("#links")
        assert links.row_count == 144
        await pilot.press("escape")
        assert app.screen is app.dashboard


async def test_detail_view_shows_every_field_and_why_one_is_missing() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(5))
        await pilot.press("d")
        screen = app.screen
        assert isinstance(screen, DetailScreen) and screen.index == 0
        text = screen_text(app)
        assert "GPU 0  NVIDIA H100 80GB HBM3" in text
        assert re.search(r"fan +not supported by this GPU/driver/VM", text)
        assert "reserved by driver" in text and "ECC uncorrected" in text
        group = screen._groups["Throttle time (cumulative)"]
        assert "sw_power_cap" in str(group.render())
        await pilot.press("right")
        assert screen.index == 1 and "GPU 1" in screen_text(app)
        await pilot.press("left", "left")
        assert screen.index == 7  # wraps around
        await pilot.press("escape")
        assert app.screen is app.dashboard


async def test_detail_of_the_selected_gpu_by_keys_and_mouse() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(3))
        await pilot.press("tab")  # from the processes to the GPUs
        assert app.dashboard.gpus.has_focus
        await pilot.press("right", "down", "enter")  # cards are two a row: 0 -> 1 -> 3
        assert isinstance(app.screen, DetailScreen) and app.screen.index == 3
        await pilot.press("escape")
        card = next(c for c in app.query(GpuCard) if c.index == 4)
        await pilot.click(card)
        assert app.dashboard.gpus.selected == 4 and app.screen is app.dashboard
        await pilot.double_click(card)
        assert isinstance(app.screen, DetailScreen) and app.screen.index == 4


async def test_q_quits_cleanly() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("q")
        await pilot.pause()
        assert app._exit
    assert app.return_code == 0


async def test_q_quits_from_any_view() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("t", "q")
        await pilot.pause()
        assert app._exit


async def test_a_hidden_dashboard_catches_up_when_shown_again() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("t")
        await show(app, pilot, [node(1, devices={0: {"util_gpu": 12.0}})])
        await pilot.press("escape")
        await pilot.pause()
        row = next(r for r in app.query(GpuRow) if r.index == 0)
        assert " 12%" in row.content.plain


class QueueFeed:
    """A feed that yields what the test puts in it, when it puts it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Snapshot] = asyncio.Queue()
        self.taken = 0

    async def stream(self, interval: float) -> Any:
        while True:
            snap = await self.queue.get()
            self.taken += 1
            yield snap


async def feed_ticks(app: GputopApp, feed: QueueFeed, ticks: range) -> None:
    """Puts ticks in the feed and waits until the app has applied the last one."""
    for t in ticks:
        feed.queue.put_nowait(node(t, devices={0: {"util_gpu": float(t % 100)}}))
    assert isinstance(app.clock, Clock)
    app.clock.t = T0 + ticks[-1] + 0.4
    await within(until(lambda: app.snapshot is not None and app.snapshot.time == T0 + ticks[-1]))


async def test_data_keeps_coming_under_help_and_the_kill_dialog() -> None:
    feed = QueueFeed()
    app = GputopApp(feed, clock=Clock(T0, follow=False),
                    kill_policy=KillPolicy(1000, "mlteam"), table_interval=0)
    async with app.run_test(size=(120, 40)) as pilot:
        await feed_ticks(app, feed, range(0, 3))
        for keys, screen in ((("question_mark",), HelpScreen), (("k",), KillScreen)):
            await pilot.press(*keys)
            assert isinstance(app.screen, screen)
            start = int(app.snapshot.time - T0) + 1  # type: ignore[union-attr]
            await feed_ticks(app, feed, range(start, start + 40))
            app.dashboard.header.tick()
            await pilot.pause()
            # Forty seconds on, the header under the dialog is live and the GPUs moved on.
            assert "● live" in app.dashboard.header.content.plain, keys
            row_text = screen_text(app)
            assert "STALE" not in row_text and "STUCK" not in row_text
            util = (start + 39) % 100
            assert re.search(rf"\b{util}%", screen_text(app)), util
            await pilot.press("escape")
        assert feed.taken == 83


async def test_q_and_help_work_in_the_kill_dialog_and_keep_the_process() -> None:
    fake = FakeProcesses()
    app = make_app(kill_policy=KillPolicy(1000, "mlteam"), terminator=terminator(fake))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("k", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "in the kill dialog: kill / keep" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, KillScreen)
        await pilot.press("q")
        await pilot.pause()
        assert app._exit
    assert fake.sent == []


async def test_q_quits_from_help() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("question_mark", "q")
        await pilot.pause()
        assert app._exit


class ListFeed:
    """A feed that plays a list of snapshots, then ends (or fails)."""

    def __init__(self, snaps: list[Snapshot], error: Exception | None = None) -> None:
        self.snaps = snaps
        self.error = error

    async def stream(self, interval: float) -> Any:
        for snap in self.snaps:
            yield snap
            await asyncio.sleep(0)
        if self.error is not None:
            raise self.error


async def test_the_feed_is_consumed_and_its_end_is_shown() -> None:
    app = GputopApp(ListFeed(series(3)), clock=frozen(T0 + 2.5), table_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.snapshot is not None and app.snapshot.time == T0 + 2
        assert "ENDED" in app.dashboard.header.content.plain
        assert "the recording has ended" in app.dashboard.warnings.content.plain


async def test_a_failing_feed_is_shown_and_the_last_data_stays() -> None:
    app = GputopApp(ListFeed(series(2), RuntimeError("NVML: driver/library mismatch")),
                    clock=frozen(T0 + 1.5), table_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "FEED FAILED" in app.dashboard.header.content.plain
        assert "driver/library mismatch" in app.dashboard.warnings.content.plain
        assert len(app.query(GpuRow)) == 8


async def test_waiting_for_the_first_poll_is_said() -> None:
    app = make_app(clock=frozen(T0))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert "waiting for the first poll" in app.dashboard.header.content.plain


def test_mouse_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run(self: App[Any], **kw: Any) -> None:
        seen.update(kw)

    monkeypatch.setattr(App, "run", fake_run)
    GputopApp(None, mouse=False).run()
    assert seen["mouse"] is False
    GputopApp(None).run()
    assert seen["mouse"] is True


def test_ansi_uses_the_terminal_palette() -> None:
    app = GputopApp(None, ansi=True)
    assert app.theme == "ansi-dark"
    assert app.ansi_color is True


def test_no_color_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert GputopApp(None).no_color
    monkeypatch.delenv("NO_COLOR")
    assert not GputopApp(None).no_color


def test_row_text_is_plain_and_fits_80_columns() -> None:
    line = row_content(h100(0, util_gpu=91.0, throttle=("sw_power_cap",)), 80)
    assert line.cell_length <= 80
    assert " 91%" in line.plain and "PWR CAP" in line.plain


@pytest.mark.skipif(not demo_path().exists(), reason="the demo recording is not built")
async def test_the_demo_recording_plays_through_the_dashboard() -> None:
    snaps = read_recording(demo_path()).snapshots
    app = make_app(clock=frozen(snaps[479].time + 0.3))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, snaps[450:480])
        cards = {c.index: c for c in app.query(GpuCard)}
        assert "THERMAL" in str(cards[5].border_title)  # the demo's hot GPU
        assert len(table(app).rows) == len(snaps[479].processes)
        await pilot.press("t")
        await pilot.pause()
        assert "NV18" in screen_text(app)


@pytest.mark.skipif(not demo_path().exists(), reason="the demo recording is not built")
async def test_the_demo_shows_the_probes_memory_split_live() -> None:
    feed = RecordingFeed.from_file(demo_path())
    feed.skip(300)
    snap = feed.poll_once()
    app = make_app(clock=frozen(snap.time + 0.4))
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [snap])
        assert "alloc" in screen_text(app) and "ctx+nccl" in screen_text(app)
        await pilot.press("tab", "d")
        await pilot.pause()
        text = screen_text(app)
        assert "by the probe" in text and "no process here runs it" not in text


def test_widgets_are_importable_without_a_running_app() -> None:
    # The line widgets build their history without an event loop (memray's pattern).
    assert isinstance(GpuCard(0, GpuHistory()), GpuCard)
    assert isinstance(DeviceSample, type)
    assert os.environ["TZ"] == "UTC"


def test_a_replay_says_when_each_finding_was_shown_and_its_condition_began() -> None:
    from gputop.diagnose.types import Finding as EngineFinding
    from gputop.ui.view.format import clock_time
    from gputop.ui.widgets.findings_panel import finding_line

    f = EngineFinding(id="loader.starvation", severity="critical", device=0, pid=1,
                      title="GPU0 starved", since=1_800_000_000.0, until=None,
                      cause="waits", opened=1_800_000_010.0)
    live, replayed = finding_line(f).plain, finding_line(f, times=True).plain
    when = f"shown {clock_time(f.opened)}, began {clock_time(f.since)}"
    assert when not in live and when in replayed
    # Findings saved before gputop kept the moment they were shown say nothing of it.
    older = EngineFinding(id="x", severity="info", device=0, pid=None, title="t",
                          since=1_800_000_000.0, until=None)
    assert "shown" not in finding_line(older, times=True).plain


def _parts(content: Any) -> tuple[tuple[str, str], ...]:
    """A Content whose spans do not overlap as (text, style) parts."""
    text, pos, parts = content.plain, 0, []
    for span in content.spans:
        parts += [(text[pos:span.start], ""), (text[span.start:span.end], span.style)]
        pos = span.end
    return (*parts, (text[pos:], ""))


def test_the_header_keeps_the_parts_that_fit_as_joining_them_would() -> None:
    """The header's line is put together once from its measured parts: at every width, what
    joining the parts that fit, the gap and the badge gives (the last part dropped first)."""
    from textual.content import Content

    from gputop.ui.widgets.status_header import fit_line

    left = Content.assemble(("gputop", "bold $accent"), (" (demo)", "$foreground-muted"))
    parts = [Content.assemble(("node-7", "bold")),
             Content.assemble(("driver ", "dim"), "580.159.04", (" · ", "dim"), "CUDA 13.0"),
             Content.assemble(("CPU ", "dim"), "43%", " ", ("RAM ", "dim"), "310/2015G"),
             Content("全角 host")]  # double-width characters
    right = Content.assemble(("12:00:01", ""), "  ", ("● live", "green"))
    kept_counts = set()
    for width in range(1, 140):
        kept = list(parts)
        line = Content("  ").join([left, *kept])
        while kept and line.cell_length + 2 + right.cell_length > width:
            kept.pop()
            line = Content("  ").join([left, *kept])
        want = (line + Content(" " * max(1, width - line.cell_length - right.cell_length))
                + right).truncate(width)
        got = Content.assemble(*fit_line(_parts(left), [_parts(p) for p in parts],
                                         _parts(right), width)).truncate(width)
        assert (got.plain, list(got.spans), got.cell_length) == (
            want.plain, list(want.spans), want.cell_length), width
        kept_counts.add(len(kept))
    assert kept_counts == set(range(len(parts) + 1))
