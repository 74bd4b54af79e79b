"""Renders the README screenshots of the dashboard: PNGs in screenshots/.

Each one plays the bundled demo recording (8x H100 training) up to a moment of its story in a
headless app with a frozen clock, exports Textual's SVG and turns it into a PNG with cairosvg.

    python tools/screenshots.py            # all of them
    python tools/screenshots.py detail     # only those whose name contains "detail"

The SVG asks for the "Fira Code" font; install it (Debian/Ubuntu: apt-get install
fonts-firacode) or the PNGs fall back to another font. Every character is placed at its own
cell, because cairosvg ignores the SVG's textLength and a long run of text would drift off the
terminal grid.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
PNG_WIDTH = 1600  # pixels; the SVG scales


@dataclass(frozen=True)
class Shot:
    name: str
    size: tuple[int, int]
    tick: int  # the demo's tick to stop at (1 s each)
    keys: Sequence[str] = ()
    history: int = 90  # ticks played before `tick`, so the history graphs are full
    theme: str | None = None  # --theme
    recording: str | None = None  # another recording than the demo, from the repository root


# The demo's story: steady training, the input pipeline starving every GPU (ticks 130-330; the
# finding opens 5 s after the probe measures the wait), GPU 5 running hot and straggling
# (450-560), GPU 2's memory growing at the end. The diagnostics engine runs over every tick up to
# the shot, as it does live.
SHOTS = (
    Shot("dashboard-120x40", (120, 40), 515),
    Shot("dashboard-80x24", (80, 24), 515),
    Shot("detail-120x40", (120, 40), 500, ("tab", *["right"] * 5, "d")),
    Shot("topology-120x40", (120, 40), 530, ("t",)),
    Shot("starved-workers-120x50", (120, 50), 300, ("s",) * 6 + ("e",)),
    Shot("dashboard-light-120x40", (120, 40), 515, theme="light"),
    # A real H200 whose DataLoader starves it (fixtures/nvidia/h200-train/README.md), 25 s after
    # the loop's first step.
    Shot("h200-starved-100x26", (100, 26), 42, ("e",), history=42,
         recording="fixtures/nvidia/h200-train/starved.jsonl.gz"),
    # A real H100 whose copy engines are full while its SMs idle
    # (fixtures/nvidia/h100-train/README.md), 36 s into the copies.
    Shot("h100-copy-bound-100x26", (100, 26), 47, ("e",), history=47,
         recording="fixtures/nvidia/h100-train/copy_bound.jsonl.gz"),
)


def align_to_cells(svg: str) -> str:
    """Give every character of every <text> element its own x position on the cell grid."""
    from rich.cells import cell_len

    def place(match: re.Match[str]) -> str:
        attrs, body = match.group(1), match.group(2)
        x = re.search(r' x="([0-9.]+)"', attrs)
        length = re.search(r' textLength="([0-9.]+)"', attrs)
        text = html.unescape(body)
        cells = cell_len(text)
        if not x or not length or cells <= 1:
            return match.group(0)
        x0, cell = float(x.group(1)), float(length.group(1)) / cells
        xs, pos = [], 0
        for ch in text:
            xs.append(f"{x0 + pos * cell:.1f}")
            pos += cell_len(ch)
        attrs = attrs.replace(x.group(0), f' x="{" ".join(xs)}"')
        attrs = attrs.replace(length.group(0), "")
        return f"<text{attrs}>{body}</text>"

    return re.sub(r"<text([^>]*)>([^<]*)</text>", place, svg)


def findings_at(snapshots: list, tick: int) -> list:  # type: ignore[type-arg]
    """The Findings open at `tick`, from the engine run over the recording up to it."""
    from gputop.diagnose import default_engine

    engine = default_engine()
    found: list = []  # type: ignore[type-arg]
    for snap in snapshots[:tick + 1]:
        found = engine.update(snap)
    return found


async def render(shot: Shot, snapshots: list) -> str:  # type: ignore[type-arg]
    from gputop.ui.app import GputopApp

    played = snapshots[max(0, shot.tick - shot.history):shot.tick + 1]
    now = played[-1].time + 0.4
    app = GputopApp(None, clock=lambda: now, table_interval=0.0,
                    title_suffix="" if shot.recording else " (demo)", theme=shot.theme)
    async with app.run_test(size=shot.size) as pilot:
        for snap in played:
            app.apply_snapshot(snap)
        app.set_findings(findings_at(snapshots, shot.tick))
        await pilot.pause()
        await pilot.press(*shot.keys)
        await pilot.pause()
        return app.export_screenshot(title="gputop")


def main(argv: Sequence[str]) -> int:
    import cairosvg

    from gputop.feeds.playback import demo_path
    from gputop.recording import read_recording

    os.environ["TZ"] = "UTC"  # the clock on screen does not depend on where this runs
    time.tzset()
    if shutil.which("fc-list"):
        fonts = subprocess.run(["fc-list", ":family=Fira Code"], capture_output=True, text=True)
        if not fonts.stdout.strip():
            print("warning: the Fira Code font is not installed; the PNGs use a fallback font",
                  file=sys.stderr)
    wanted = [s for s in SHOTS if not argv or any(a in s.name for a in argv)]
    demo = read_recording(demo_path()).snapshots
    OUT.mkdir(exist_ok=True)
    for shot in wanted:
        snapshots = read_recording(ROOT / shot.recording).snapshots if shot.recording else demo
        svg = align_to_cells(asyncio.run(render(shot, snapshots)))
        target = OUT / f"{shot.name}.png"
        cairosvg.svg2png(bytestring=svg.encode(), write_to=str(target), output_width=PNG_WIDTH)
        print(f"{target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
