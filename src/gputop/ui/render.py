"""Lines for the line-API widgets (cards, rows, header, process table): Content to Strip with
theme variables resolved, and the span of a line that changed since it was last painted.

Repainting only the changed span matters over SSH: a card line that went from 97 % to 98 %
sends a few cells, not the whole line with an escape sequence for every style run."""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from textual.content import Content
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget


def content_strip(widget: Widget, content: Content, width: int,
                  base: Style | None = None) -> Strip:
    """`content` as a Strip exactly `width` cells wide, on the widget's own style (or `base`)."""
    base_style = widget.visual_style if base is None else base
    parse = widget.app.stylesheet.parse_style
    segments = [Segment(text, style.rich_style)
                for text, style in content.render(base_style, end="", parse_style=parse)]
    # Adjacent runs in one style become one segment: each segment costs an escape sequence.
    return Strip(segments).simplify().adjust_cell_length(width, base_style.rich_style)


def _cells(strip: Strip) -> list[tuple[str, object]] | None:
    """(character, style) per cell, or None when a character is not one cell wide."""
    out: list[tuple[str, object]] = []
    for segment in strip:
        text, style = segment.text, segment.style
        if cell_len(text) != len(text):
            return None
        out.extend((ch, style) for ch in text)
    return out


def changed_span(old: Strip | None, new: Strip) -> tuple[int, int] | None:
    """The cells [start, end) where `new` differs from `old`; None when they are the same; the
    whole line when they cannot be compared cell by cell."""
    width = new.cell_length
    if old is None or old.cell_length != width:
        return (0, width)
    a, b = _cells(old), _cells(new)
    if a is None or b is None or len(a) != len(b):
        return (0, width)
    if a == b:
        return None
    start = 0
    while a[start] == b[start]:
        start += 1
    end = len(a)
    while a[end - 1] == b[end - 1]:
        end -= 1
    return (start, end)
