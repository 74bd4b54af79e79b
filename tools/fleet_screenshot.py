"""Renders the README screenshot of `gputop fleet`: screenshots/fleet-120x40.png (and, with
`--node`, fleet-node-120x40.png: Enter on a node).

A made-up fleet of twelve 8xH100 nodes is served by the fake Prometheus API on loopback (one
node down, one stale, Findings on two), read by the real fleet model, and shown in a headless
app; the SVG is turned into a PNG as tools/screenshots.py does.

    python tools/fleet_screenshot.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
SIZE = (120, 40)


def _align_to_cells() -> object:
    sys.path.insert(0, str(ROOT / "tools"))
    from screenshots import align_to_cells  # the README's other screenshots do the same

    return align_to_cells


def demo_fleet() -> object:
    from gputop.testing.fake_prometheus import FakeGpu, FakeNode, FleetAnswers

    nodes = []
    for i in range(1, 13):
        gpus = [FakeGpu(util=90 + (i * 7 + g * 3) % 10, fb_used=60000 + (i * 977 + g * 331) % 18000,
                        fb_free=81559 - 60000 - (i * 977 + g * 331) % 18000 - 500,
                        temp=58 + (i + g) % 9, power=560 + (i * 13 + g * 17) % 120,
                        sm_clock=1980 - (i + g) % 3 * 15)
                for g in range(8)]
        nodes.append(FakeNode(f"gpu-node-{i:02d}", f"10.0.4.{i}:9400", job="gpu", gpus=gpus,
                              interval=15))
    starving = nodes[2]
    for g in starving.gpus:
        g.util = 31 + g.fb_used % 7
        g.power = 290 + g.fb_used % 40
        g.throttle = 0
    starving.findings = [{"id": "loader.starvation", "severity": "warning", "gpu": "",
                          "pid": "48213"}]
    hot = nodes[8]
    hot.gpus[5].temp, hot.gpus[5].throttle, hot.gpus[5].sm_clock = 91, 0x44, 1410
    hot.findings = [{"id": "thermal.hw", "severity": "critical", "gpu": "5", "pid": ""},
                    {"id": "job.straggler", "severity": "warning", "gpu": "5", "pid": "51877"}]
    idle = nodes[10]
    for g in idle.gpus:
        g.util, g.fb_used, g.fb_free, g.power, g.sm_clock, g.throttle = 0, 0, 81059, 71, 345, 1
    nodes[11].sample_age = 95
    return FleetAnswers(nodes, time=1_800_000_000.0)


async def render(node: bool) -> str:
    from gputop.fleet.model import Fleet
    from gputop.fleet.promql import Prometheus
    from gputop.testing.fake_prometheus import FakePrometheus
    from gputop.ui.fleet import FleetApp

    answers = demo_fleet()
    with FakePrometheus(answers) as prom:
        fleet = Fleet(Prometheus(prom.url))
        fleet.open()  # remembers every node ...
        down = answers.nodes[6]  # ... so that the one that goes down stays listed
        down.up, down.exporting = False, False
        answers.time += 20  # four refreshes later
        answers.nodes[11].sample_age += 20
        view = await asyncio.to_thread(fleet.refresh)
    app = FleetApp(None, view=view, url="http://prometheus.example:9090", interval=5)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        if node:
            await pilot.press("down", "down", "down", "down", "down", "down", "down", "down",
                              "enter")
            await pilot.pause()
        return app.export_screenshot(title="gputop fleet")


def main(argv: list[str]) -> int:
    import cairosvg

    os.environ["TZ"] = "UTC"
    time.tzset()
    align = _align_to_cells()
    OUT.mkdir(exist_ok=True)
    shots = [("fleet-120x40", False)] + ([("fleet-node-120x40", True)] if "--node" in argv else [])
    for name, node in shots:
        svg = align(asyncio.run(render(node)))  # type: ignore[operator]
        target = OUT / f"{name}.png"
        cairosvg.svg2png(bytestring=svg.encode(), write_to=str(target), output_width=1600)
        print(target.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
