"""What the dashboard looks like, pinned as SVG snapshots at 80x24 and 120x40.

The node is the bundled demo recording (8x H100 training) where it is built, played up to a
chosen tick; the edge cases (16 GPUs, a lost and a hot GPU, hostile process names, a stale
poll) are synthetic snapshots from tests/helpers/ui.py. The clock is frozen and nothing animates,
so the SVGs are byte-stable. Update with `pytest tests/ui/test_snapshots.py --snapshot-update` after
looking at the change (snapshot_report.html shows the difference)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from textual.pilot import Pilot

from gputop.feeds.playback import demo_path
from gputop.model import Snapshot
from gputop.recording import read_recording
from gputop.ui.app import GputopApp
from gputop.ui.view.kill import KillPolicy
from tests.helpers.ui import T0, node, probed_node, process, sawtooth, series, troubled

SMALL = (80, 24)
LARGE = (120, 40)
needs_demo = pytest.mark.skipif(not demo_path().exists(),
                                reason="the demo recording is not built")

# Where to stop in the demo's story (tick = 1 s): steady training, then GPU 5 running hot.
STEADY, HOT = 100, 480


@cache
def demo() -> list[Snapshot]:
    return read_recording(demo_path()).snapshots


pytestmark = pytest.mark.usefixtures("utc")


@dataclass
class Finding:
    severity: str
    title: str
    detail: str


def app_for(snaps: list[Snapshot], *, age: float = 0.4, **kw: Any) -> GputopApp:
    """An app whose clock stands `age` seconds after the last snapshot."""
    now = snaps[-1].time + age
    kw.setdefault("kill_policy", KillPolicy(1000, "mlteam"))
    return GputopApp(None, clock=lambda: now, table_interval=0.0, **kw)


def play(app: GputopApp, snaps: list[Snapshot], *then: str,
         findings: list[Finding] | None = None) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        for snap in snaps:
            app.apply_snapshot(snap)
        if findings:
            app.set_findings(findings)
        await pilot.pause()
        await pilot.press(*then)
        await pilot.pause()

    return run_before


def check(snap_compare: Any, snaps: list[Snapshot], size: tuple[int, int], *keys: str,
          findings: list[Finding] | None = None, **kw: Any) -> None:
    app = app_for(snaps, **kw)
    assert snap_compare(app, terminal_size=size,
                        run_before=play(app, snaps, *keys, findings=findings))


def demo_at(tick: int, history: int = 60) -> list[Snapshot]:
    return demo()[max(0, tick - history):tick + 1]


# ---------------------------------------------------------------------------------------------
# The demo node


@needs_demo
@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x40"])
def test_demo_steady_training(snap_compare: Any, size: tuple[int, int]) -> None:
    check(snap_compare, demo_at(STEADY), size)


@needs_demo
@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x40"])
def test_demo_hot_gpu(snap_compare: Any, size: tuple[int, int]) -> None:
    check(snap_compare, demo_at(HOT), size)


@needs_demo
@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x40"])
def test_demo_detail_view(snap_compare: Any, size: tuple[int, int]) -> None:
    check(snap_compare, demo_at(HOT), size, "tab", "right", "right", "right", "right",
          "right", "d")


@needs_demo
@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x40"])
def test_demo_topology_view(snap_compare: Any, size: tuple[int, int]) -> None:
    check(snap_compare, demo_at(HOT), size, "t")


@needs_demo
def test_demo_workers_sorted_by_cpu(snap_compare: Any) -> None:
    check(snap_compare, demo_at(250), LARGE, "s", "s", "s", "s", "s", "s", "e")


# ---------------------------------------------------------------------------------------------
# Synthetic situations


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x40"])
def test_troubled_node(snap_compare: Any, size: tuple[int, int]) -> None:
    findings = [Finding("critical", "GPU 5 fell off the bus",
                        "Xid 79: drain the node and reset the GPU"),
                Finding("warning", "GPU 3 thermal slowdown",
                        "SM 1050/1980 MHz, 1 °C from the slowdown temperature")]
    check(snap_compare, [*series(29, util=sawtooth), troubled(29)], size, findings=findings)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x40"])
def test_sixteen_gpus(snap_compare: Any, size: tuple[int, int]) -> None:
    check(snap_compare, [node(t, n_gpus=16, util=sawtooth) for t in range(30)], size)


def test_stale_poll(snap_compare: Any) -> None:
    check(snap_compare, series(30), SMALL, age=12.0)


def test_hostile_process_names_are_text(snap_compare: Any) -> None:
    evil = (
        process(666, 0, user="[b]root", cmdline=("\x1b]0;pwned\x07sh", "-c", "[red]x[/red]")),
        process(667, 1, user="eve", cmdline=("evil\u202egnp.exe", "\r\n", "\x9b31m")),
        process(668, 2, cmdline=("python", "日本語の引数", "--name=🚀")),
    )
    check(snap_compare, [node(0, processes=evil)], LARGE)


def test_filter_and_workers(snap_compare: Any) -> None:
    check(snap_compare, series(5), SMALL, "e", "slash", *"mlteam")


def test_help(snap_compare: Any) -> None:
    check(snap_compare, series(5), LARGE, "question_mark")


def test_kill_confirmation(snap_compare: Any) -> None:
    check(snap_compare, series(5), SMALL, "k")


def test_ansi_theme(snap_compare: Any) -> None:
    check(snap_compare, [*series(29, util=sawtooth), troubled(29)], SMALL, ansi=True)


def test_no_color(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    check(snap_compare, [*series(29, util=sawtooth), troubled(29)], LARGE, "tab")


def test_waiting_for_data(snap_compare: Any) -> None:
    app = GputopApp(None, clock=lambda: T0)
    assert snap_compare(app, terminal_size=SMALL)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "120x40"])
def test_memory_split_from_the_probe(snap_compare: Any, size: tuple[int, int]) -> None:
    """Every rank runs the probe: the bars split tensors, cache, context + NCCL and the
    notebook on GPU 7, named on each card's border (or below the lines at 80x24)."""
    check(snap_compare, [probed_node(t) for t in range(30)], size)
