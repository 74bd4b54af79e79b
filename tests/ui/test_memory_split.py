"""The memory split on the dashboard: where a GPU's processes run the probe, the memory bar shows
PyTorch's tensors, its cache, the rest of the process (context, NCCL) and other processes, each
with its own glyph and named in words; without a probe, the bar is used of total as before."""

from __future__ import annotations

from textual.content import Content

from gputop.model.memory_split import memory_split
from gputop.ui import memory
from gputop.ui.widgets.gpu_card import GpuCard, memory_line
from gputop.ui.widgets.gpu_row import row_content
from tests.helpers.ui import make_app, node, probed_node, screen_text, show


def plain(content: Content) -> str:
    return content.plain


# -- drawing, without an app -----------------------------------------------------------------


def test_small_parts_still_get_a_cell_and_the_cells_add_up_to_the_used_share() -> None:
    # 47 GiB tensors, 15 cache, 1.9 context + NCCL on an 80 GiB GPU, 14 cells.
    assert memory.cells([47 / 80, 15 / 80, 1.9 / 80, 0.0], 14) == [8, 2, 1, 0]
    assert memory.cells([0.0, 0.0, 0.0, 0.0], 14) == [0, 0, 0, 0]
    assert sum(memory.cells([0.6, 0.3, 0.05, 0.05], 10)) == 10  # full: never past the frame


def test_each_part_has_its_own_glyph_so_the_bar_reads_without_colour() -> None:
    s = probed_node()
    d = s.devices[7]  # 70 GiB: the rank (67 GiB) and the notebook (3 GiB, no probe)
    split = memory_split(s, 7)
    assert split is not None
    line = plain(memory_line(d, split))
    bar = line[line.index("▕") + 1:line.index("▏")]
    assert bar.count("█") > bar.count("▓") > 0 and "░" in bar and "▞" in bar
    assert bar.index("█") < bar.index("▓") < bar.index("░") < bar.index("▞") < bar.index("▒")
    assert line.endswith(" 70.0/79.6G")
    without = plain(memory_line(d))
    assert "▓" not in without and "░" not in without and "▞" not in without


def test_the_legend_names_each_part_in_words_and_shortens_to_fit() -> None:
    s = probed_node()
    split = memory_split(s, 7)
    assert split is not None
    full = plain(memory.legend(split, 80))
    assert full == "█ alloc 48.8  ▓ cache 16.2  ░ ctx+nccl 2.0  ▞ other 3.0 GiB"
    short = plain(memory.legend(split, 48))
    assert short == "█ alloc 48.8 ▓ cache 16.2 ░ ctx 2.0 ▞ other 3.0G"
    assert len(plain(memory.legend(split, 20))) <= 20
    alone = memory_split(s, 0)
    assert alone is not None
    assert plain(memory.legend(alone, 80)) == "█ alloc 43.5  ▓ cache 14.5  ░ ctx+nccl 2.0 GiB"


def test_the_compact_row_shows_the_split_in_its_bar() -> None:
    s = probed_node()
    row = plain(row_content(s.devices[0], 80, split=memory_split(s, 0)))
    assert "▓" in row and "░" in row and "60/80G" in row
    assert "▓" not in plain(row_content(s.devices[0], 80))


# -- the dashboard ---------------------------------------------------------------------------


async def test_a_card_names_the_split_on_its_border_and_updates_it_in_place() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [probed_node(0)])
        card = app.dashboard.query_one("#gpu-cards").query(GpuCard).first()
        assert card.index == 0
        legend = Content.from_markup(card.border_subtitle or "").plain
        assert "alloc 43.5" in legend and "cache 14.5" in legend and "ctx+nccl 2.0" in legend
        text = screen_text(app)
        assert "alloc 43.5" in text and "▓" in text and "░" in text
        # The next tick: PyTorch freed activations. The same card shows it, and the bar
        # with it.
        await show(app, pilot, [probed_node(1, share=0.6)])
        assert app.dashboard.query_one("#gpu-cards").query(GpuCard).first() is card
        assert "alloc 34.8" in Content.from_markup(card.border_subtitle or "").plain
        # The probes go away (the job ended its probe): the card is used of total again.
        await show(app, pilot, [node(2)])
        assert not card.border_subtitle
        assert "▓" not in screen_text(app)


async def test_the_compact_layout_names_the_selected_gpus_split_below_its_lines() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot, [probed_node(0)])
        text = screen_text(app)
        assert "GPU 0 memory  █ alloc 43.5  ▓ cache 14.5  ░ ctx+nccl 2.0 GiB" in text
        app.dashboard.gpus.focus()
        await pilot.press("up", *["down"] * 7)
        await pilot.pause()
        assert "GPU 7 memory  █ alloc 48.8" in screen_text(app)
        await show(app, pilot, [node(1)])
        assert "GPU 7 memory" not in screen_text(app)  # no probe, no legend line


async def test_the_detail_view_splits_the_gpu_and_each_process() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [probed_node(0)])
        app.dashboard.gpus.focus()
        await pilot.press(*["right"] * 7, "d")
        await pilot.pause()
        text = screen_text(app)
        assert "by the probe" in text and "PID 2210438" in text
        assert "PID 1187334" in text and "3.0G, no probe" in text
        await pilot.press("left")
        await show(app, pilot, [node(1)])
        assert "no process here runs it" in screen_text(app)
