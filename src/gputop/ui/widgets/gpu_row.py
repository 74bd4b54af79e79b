"""One GPU on one line: the compact layout for 80x24 and for 16 GPUs.

      0 H100 80GB ▕██████████▌ ▏ 91% ▕████████▒   ▏ 61/80G 71°C 612/700W PWR CAP

The line adapts to the widget's width (longer bars and names on wider terminals); it is built
only when the sample or the width changes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from textual.content import Content
from textual.events import Click
from textual.message import Message

from gputop.model import DeviceSample, Missing, value
from gputop.model.memory_split import MemorySplit
from gputop.ui import bars, memory
from gputop.ui.text import sanitize
from gputop.ui.view import format as fmt
from gputop.ui.view import styles
from gputop.ui.view.status import CROSS, Badge, badges
from gputop.ui.widgets.process_table import fit
from gputop.ui.widgets.text_line import TextLine


@dataclass(frozen=True, slots=True)
class RowLayout:
    name: int
    bar: int
    status: int


# Cells on the line besides the name, the two bars and the status: the index and the gaps around
# the name (5), the util frame and value (2 + 5), the memory frame and value (2 + 8),
# temperature (4), power (9), and the gaps between them (4).
FIXED = 39
UTIL_TEXT = 5
MEM_TEXT = 8
TEMP_TEXT = 4
POWER_TEXT = 9


def row_layout(width: int) -> RowLayout:
    name = max(8, min(18, 8 + (width - 80) // 4))
    bar = max(6, min(30, (width - FIXED - 10 - name) // 2))
    status = max(0, width - FIXED - name - 2 * bar)
    return RowLayout(name, bar, status)


def header_line(width: int) -> Content:
    """Column labels aligned with `GpuRow` lines of the same width."""
    lay = row_layout(width)
    parts = [
        "  # ",
        "NAME".ljust(lay.name),
        " ",
        "UTIL".ljust(lay.bar + 2 + UTIL_TEXT),
        " ",
        "MEMORY GiB".ljust(lay.bar + 2 + MEM_TEXT),
        " ",
        "TEMP".rjust(TEMP_TEXT),
        " ",
        "POWER".rjust(POWER_TEXT),
        " ",
        "STATUS",
    ]
    return Content("".join(parts)[:width]).stylize(styles.LABEL)


def temp_style(d: DeviceSample) -> str:
    margin = value(d.temp_margin)
    if margin is None:
        return ""
    if margin <= 3:
        return styles.text_style("critical")
    if margin <= 10:
        return styles.text_style("warning")
    return ""


@lru_cache(maxsize=256)
def _head(index: int, name: str, width: int) -> str:
    """The row's start, "  0 H100 80GB ": constant for a GPU, so built once. A long name
    loses whole words from its end ("H100 80GB HBM3" -> "H100 80GB" -> "H100") before it is
    cut."""
    words = sanitize(fmt.short_gpu_name(name)).split()
    while len(words) > 1 and len(" ".join(words)) > width:
        words.pop()
    return f" {index:>2} " + fit(" ".join(words), width) + " "


def row_content(d: DeviceSample, width: int, found: list[Badge] | None = None,
                split: MemorySplit | None = None) -> Content:
    """The GPU's line; with a probe's split, the memory bar shows its parts (the legend is the
    panel's line below the rows)."""
    lay = row_layout(width)
    head = _head(d.index, d.name, lay.name)
    if d.lost is not None:
        since = f" since {fmt.clock_time(d.lost.since)}" if d.lost.since else ""
        return Content.assemble(head, (f" {CROSS} LOST ", styles.badge_style("critical")),
                                f" fell off the bus{since}").truncate(width)

    util = value(d.util_gpu)
    util_frac = None if util is None else util / 100.0
    total = value(d.mem_total)
    used = value(d.mem_used)
    if used is not None and total is not None:
        mem_text = f"{used / fmt.GiB:.0f}/{total / fmt.GiB:.0f}G"
    else:
        mem_text = fmt.label(d.mem_used)
    draw, limit = value(d.power_draw), value(d.power_limit)
    if draw is not None and limit is not None:
        power = f"{draw:>3.0f}/{limit:.0f}W"
    else:
        power = fmt.label(d.power_draw, fmt.watts)
    temp = fmt.label(d.temp_gpu, fmt.celsius)
    parts: list[bars.Part | str] = [
        head,
        *bars.meter_parts(util_frac, lay.bar, styles.UTIL),
        (f"{fmt.label(d.util_gpu, fmt.percent):>{UTIL_TEXT}} ",
         "" if util is not None else styles.MUTED),
        *memory.bar_parts(d, lay.bar, split),
        (f"{mem_text:>{MEM_TEXT}} ", "" if used is not None else styles.MUTED),
        (f"{temp:>{TEMP_TEXT}}", temp_style(d) or _muted_if_missing(d.temp_gpu)),
        " ",
        (f"{power:>{POWER_TEXT}} ", "" if draw is not None else styles.MUTED),
    ]
    room = lay.status
    for b in badges(d) if found is None else found:
        chip = len(b.text) + 3
        if chip > room:
            break
        parts += [(f" {b.text} ", styles.badge_style(b.severity)), " "]
        room -= chip
    return Content.assemble(*parts)  # fits by construction; the line is cropped when drawn


def _muted_if_missing(v: object) -> str:
    return styles.MUTED if isinstance(v, Missing) else ""


class GpuRow(TextLine):
    """A GPU in one line. Click selects it; a second click opens the detail view."""

    DEFAULT_CSS = """
    GpuRow.-critical {
        background: $error 15%;
    }
    """

    class Clicked(Message):
        def __init__(self, index: int, chain: int) -> None:
            super().__init__()
            self.index = index
            self.chain = chain

    def __init__(self, index: int, *, id: str | None = None) -> None:
        super().__init__(Content(f" {index:>2} …"), id=id)
        self.index = index
        self._sample: DeviceSample | None = None
        self._split: MemorySplit | None = None

    def update(self, d: DeviceSample, split: MemorySplit | None = None) -> None:
        """Show a sample and its memory split; only the cells that changed are repainted."""
        if d == self._sample and split == self._split:
            return
        self._sample, self._split = d, split
        found = badges(d)
        self.set_class(bool(found) and found[0].severity == "critical", "-critical")
        self.set(row_content(d, self.size.width or 80, found, split))

    def select(self, selected: bool) -> None:
        self.set_class(selected, "-selected")

    def on_resize(self) -> None:
        if self._sample is not None:
            self.set(row_content(self._sample, self.size.width, split=self._split))

    def on_click(self, event: Click) -> None:
        self.post_message(self.Clicked(self.index, event.chain))
