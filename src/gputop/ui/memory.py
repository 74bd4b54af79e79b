"""The memory split (gputop.model.memory_split) drawn: a bar of four segments and its legend in
words.

    ▕████████▓▓▓░▒ ▏   █ alloc 47.2  ▓ cache 15.1  ░ ctx+nccl 1.9 GiB

Each part has its own glyph as well as its own colour, so the bar reads under NO_COLOR and on
16-colour terminals; the legend names each glyph. Pure: Content in, Content out."""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content

from gputop.model import DeviceSample
from gputop.model.memory_split import MemorySplit, ProcessMemory
from gputop.ui import bars
from gputop.ui.view import format as fmt
from gputop.ui.view import styles
from gputop.ui.view.status import fraction, thresholds

ALLOC, CACHE, NON_PYTORCH, OTHER = "█", "▓", "░", "▞"
GLYPHS = (ALLOC, CACHE, NON_PYTORCH, OTHER)
NON_PYTORCH_STYLE = "$foreground"
OTHER_STYLE = styles.MUTED
# (long label, short label) per part; the legend uses the short ones where the long do not fit.
LABELS = (("alloc", "alloc"), ("cache", "cache"), ("ctx+nccl", "ctx"), ("other", "other"))
MIN_CELL = 0.01  # a part of at least 1 % of the GPU gets a cell even when it rounds to none
SHOWN = 0.05 * fmt.GiB  # the legend leaves out "other" below this


def part_styles(base: str) -> tuple[str, str, str, str]:
    """Styles of the four parts; `base` (the memory colour, or the warning one when nearly full)
    for PyTorch's own two."""
    return base, base, NON_PYTORCH_STYLE, OTHER_STYLE


def cells(fractions: Sequence[float], width: int) -> list[int]:
    """Whole cells per part, adding up to the rounded total: largest remainders first, and one
    cell at least for a part of MIN_CELL or more, taken from the largest part."""
    exact = [max(0.0, f) * width for f in fractions]
    out = [int(e) for e in exact]
    for i, f in enumerate(fractions):
        if f >= MIN_CELL and out[i] == 0:
            out[i] = 1
    want = min(width, max(round(sum(exact)), sum(1 for n in out if n)))
    while sum(out) < want:
        i = max(range(len(out)), key=lambda k: exact[k] - out[k])
        out[i] += 1
    while sum(out) > want:
        i = max(range(len(out)), key=lambda k: out[k])
        out[i] -= 1
    return out


def split_parts(split: MemorySplit, width: int, reserved: float | None,
                base: str) -> list[bars.Part]:
    """The framed bar: the four parts (fractions of total), the driver's reserve (▒), free."""
    total = float(split.total) or 1.0
    runs = cells([part / total for part in split.parts], width)
    parts: list[bars.Part] = [(bars.LEFT, bars.FRAME_STYLE)]
    for glyph, style, n in zip(GLYPHS, part_styles(base), runs):
        if n:
            parts.append((glyph * n, style))
    room = width - sum(runs)
    rsv = min(room, max(1, round(reserved * width))) if reserved else 0
    parts += [(bars.RESERVED * rsv, styles.MUTED), (" " * (room - rsv), ""),
              (bars.RIGHT, bars.FRAME_STYLE)]
    return parts


def bar_parts(d: DeviceSample, width: int, split: MemorySplit | None) -> list[bars.Part]:
    """A GPU's memory bar: used (█) and the driver's reserve (▒) of total, or with a split, its
    four parts; the warning colour when nearly full."""
    used = fraction(d.mem_used, d.mem_total)
    reserved = fraction(d.mem_reserved, d.mem_total)
    base = bars.level_style(used, styles.MEMORY, warn_at=thresholds().memory_warn / 100)
    if split is not None:
        return split_parts(split, width, reserved, base)
    return bars.memory_parts(used, reserved, width, base)


def _number(n: int, digits: int) -> str:
    return f"{n / fmt.GiB:.{digits}f}"


def legend(split: MemorySplit, width: int, base: str = styles.MEMORY) -> Content:
    """The GPU's parts in words with their glyphs, in GiB, as long as fits `width`:
    "█ alloc 47.2  ▓ cache 15.1  ░ ctx+nccl 1.9  ▞ other 3.0 GiB", then shorter forms. "other"
    is left out when there is next to none."""
    other = split.other if split.other >= SHOWN else None
    return parts_legend((split.allocated, split.cached, split.non_pytorch, other), width, base)


def process_legend(pm: ProcessMemory, width: int, base: str = styles.MEMORY) -> Content:
    """One probed process's parts, as `legend` (without "ctx+nccl" where NVML gives no figure
    for the process)."""
    return parts_legend((pm.allocated, pm.cached, pm.non_pytorch, None), width, base)


def parts_legend(parts: Sequence[int | None], width: int, base: str = styles.MEMORY) -> Content:
    """The parts that are not None, the longest form that fits `width`."""
    shown = [(i, n) for i, n in enumerate(parts) if n is not None]
    glyph_styles = part_styles(base)
    for gap, long, digits, unit in (("  ", True, 1, " GiB"), (" ", True, 1, " GiB"),
                                    (" ", False, 1, "G"), (" ", False, 0, "G")):
        items = [Content.assemble((GLYPHS[i], glyph_styles[i]), " ",
                                  (LABELS[i][0 if long else 1], styles.LABEL), " ",
                                  _number(n, digits)) for i, n in shown]
        line = Content(gap).join(items) + Content(unit).stylize(styles.LABEL)
        if line.cell_length <= width:
            return line
    compact = [Content.assemble((GLYPHS[i], glyph_styles[i]), _number(n, 0)) for i, n in shown]
    line = Content(" ").join(compact) + Content("G").stylize(styles.LABEL)
    return line.truncate(width, ellipsis=True)


def names(base: str = styles.MEMORY) -> Content:
    """The glyphs and their words without numbers: "█ alloc ▓ cache ░ ctx+nccl ▞ other"."""
    return Content(" ").join(
        Content.assemble((glyph, style), " ", (words[0], styles.LABEL))
        for glyph, style, words in zip(GLYPHS, part_styles(base), LABELS))
