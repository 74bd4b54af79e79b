"""Lines for the line-API widgets (cards, rows, header, process table): Content to Strip with
theme variables resolved, and the span of a line that changed since it was last painted.

Repainting only the changed span matters over SSH: a card line that went from 97 % to 98 %
sends a few cells, not the whole line with an escape sequence for every style run."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

_RICH: dict[tuple[str, Style, str], RichStyle] = {}  # (theme, base, style) -> Rich style


def _rich(widget: Widget, base: Style, style: str | Style) -> RichStyle:
    if isinstance(style, Style):
        return (base + style).rich_style
    key = (widget.app.theme, base, style)
    found = _RICH.get(key)
    if found is None:
        if len(_RICH) > 4096:  # themes come and go; the set of styles in use is small
            _RICH.clear()
        found = _RICH[key] = (base + widget.app.stylesheet.parse_style(style)).rich_style
    return found


def content_strip(widget: Widget, content: Content, width: int,
                  base: Style | None = None) -> Strip:
    """`content` as a Strip exactly `width` cells wide, on the widget's own style (or `base`).

    The lines here are built with Content.assemble, whose spans do not overlap: those are drawn
    directly, with each (base, style) pair resolved once; anything else goes through
    Content.render."""
    base_style = widget.visual_style if base is None else base
    base_rich = base_style.rich_style
    text, spans = content.plain, content.spans
    segments: list[Segment] = []
    pos = 0
    for span in spans:
        if span.start < pos:  # overlapping spans: let Content combine them
            parse = widget.app.stylesheet.parse_style
            segments = [Segment(t, st.rich_style)
                        for t, st in content.render(base_style, end="", parse_style=parse)]
            break
        if span.start > pos:
            segments.append(Segment(text[pos:span.start], base_rich))
        if span.end > span.start:
            segments.append(Segment(text[span.start:span.end],
                                    _rich(widget, base_style, span.style)))
        pos = span.end
    else:
        if pos < len(text):
            segments.append(Segment(text[pos:], base_rich))
    # Adjacent runs in one style become one segment: each segment costs an escape sequence.
    return Strip(segments).simplify().adjust_cell_length(width, base_rich)


def changed_span(old: Strip | None, new: Strip) -> tuple[int, int] | None:
    """The cells [start, end) where `new` differs from `old`; None when they are the same; the
    whole line when they cannot be compared cell by cell (a character not one cell wide)."""
    width = new.cell_length
    if old is None or old.cell_length != width:
        return (0, width)
    a, b = list(old), list(new)
    if sum(len(s.text) for s in a) != width or sum(len(s.text) for s in b) != width:
        return (0, width)
    # Common prefix, segment by segment, then character by character inside the first
    # segments that differ (when their styles agree).
    i = start = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        start += len(a[i].text)
        i += 1
    if i == len(a) and i == len(b):
        return None
    if i < len(a) and i < len(b) and a[i].style == b[i].style:
        start += _common(a[i].text, b[i].text)
    # Common suffix, the same way from the end.
    j = tail = 0
    while j < len(a) - i and j < len(b) - i and a[-1 - j] == b[-1 - j]:
        tail += len(a[-1 - j].text)
        j += 1
    if j < len(a) - i and j < len(b) - i and a[-1 - j].style == b[-1 - j].style:
        tail += _common(a[-1 - j].text[::-1], b[-1 - j].text[::-1])
    end = max(start + 1, width - tail)
    return (min(start, width - 1), min(end, width))


def _common(x: str, y: str) -> int:
    n = 0
    for p, q in zip(x, y):
        if p != q:
            break
        n += 1
    return n
