"""What keeps the running dashboard light, checked as behaviour: a tick repaints every cell that
changed (and only lines that changed), and start-up's objects are set aside from the garbage
collector once the dashboard has settled."""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

from textual.geometry import Region

from gputop.ui.widgets.gpu_card import HISTORIES, GpuCard
from tests.helpers.ui import T0, make_app, node, sawtooth, series, show


def _cells(card: GpuCard, y: int) -> list[tuple[str, Any]]:
    return [(ch, seg.style) for seg in card.render_line(y) for ch in seg.text]


def _covered(regions: list[Region], x: int, y: int) -> bool:
    return any(r.y == y and r.x <= x < r.right for r in regions)


async def test_a_tick_repaints_every_changed_cell_of_meters_and_graphs() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        snaps = series(40, util=sawtooth)  # the graphs move every tick
        await show(app, pilot, snaps[:39])
        card = next(c for c in app.query(GpuCard) if c.index == 1)
        before = [_cells(card, y) for y in range(len(HISTORIES))]
        painted: list[Region] = []
        original = card.refresh

        def spy(*regions: Region, **kw: Any) -> Any:
            painted.extend(regions)
            return original(*regions, **kw)

        card.refresh = spy  # type: ignore[method-assign]
        tick = dataclasses.replace(
            node(39, util=sawtooth, devices={1: {"power_draw": 512.0, "mem_used": 70 * 2**30}}),
            time=T0 + 39)
        app.apply_snapshot(tick)
        card.refresh = original  # type: ignore[method-assign]
        after = [_cells(card, y) for y in range(len(HISTORIES))]
        changed = [(x, y) for y in range(len(HISTORIES))
                   for x, (a, b) in enumerate(zip(before[y], after[y])) if a != b]
        meter_end = 33  # the meter's cells, then the graph's
        assert any(x < meter_end for x, _ in changed) and any(x > meter_end for x, _ in changed)
        missed = [(x, y) for x, y in changed if not _covered(painted, x, y)]
        assert missed == []
        # Lines with nothing new are not repainted at all.
        assert {r.y for r in painted} <= {y for _, y in changed}


async def test_settling_sets_start_up_aside_from_the_collector_and_ticks_go_on() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, series(3))
        gc.unfreeze()
        try:
            app.settle()
            assert gc.get_freeze_count() > 0
            await show(app, pilot, [node(3, util=lambda g, t: 12.0)])
            card = next(c for c in app.query(GpuCard) if c.index == 0)
            assert " 12%" in "".join(seg.text for seg in card.render_line(0))
        finally:
            gc.unfreeze()
