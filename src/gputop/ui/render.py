"""Lines for the line-API widgets (cards, rows, header, process table): Content to Strip with
theme variables resolved, the cells of a line that changed since it was last painted, and the
border and padding a widget's changing lines are set in (`framed_lines`).

Repainting only the changed cells matters over SSH: a card line that went from 97 % to 98 %
sends a few cells, not the whole line with an escape sequence for every style run (with
textual_private, which makes Textual send a region from its start)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

from gputop.ui import textual_private

if TYPE_CHECKING:
    from textual.color import Color
    from typing_extensions import Self

# Rich styles by theme and base style, then by style text: a line resolves each of its spans
# with one lookup by a short string. Style texts that come out the same share one Rich style
# (the base style is ""), so two parts are in one style exactly when they have the same object.
_RICH: dict[tuple[str, Style], dict[str, RichStyle]] = {}


def _resolver(widget: Widget, base: Style) -> dict[str, RichStyle]:
    key = (widget.app.theme, base)
    found = _RICH.get(key)
    if found is None:
        if len(_RICH) > 256:  # themes come and go; the set of styles in use is small
            _RICH.clear()
        found = _RICH[key] = {"": base.rich_style}
    return found


def _rich(widget: Widget, base: Style, style: str | Style,
          resolved: dict[str, RichStyle]) -> RichStyle:
    if isinstance(style, Style):
        return (base + style).rich_style
    found = resolved.get(style)
    if found is None:
        found = (base + widget.app.stylesheet.parse_style(style)).rich_style
        found = resolved[style] = next((r for r in resolved.values() if r == found), found)
    return found


# A line `width` cells wide as style runs: its text, where each run ends, and each run's style
# (`part_runs`, `changed_runs`).
Runs = tuple[str, list[int], list[Any]]


def content_strip(widget: Widget, content: Content, width: int,
                  base: Style | None = None) -> Strip:
    """`content` as a Strip exactly `width` cells wide, on the widget's own style (or `base`).

    The lines here are built with Content.assemble, whose spans do not overlap: those are drawn
    directly, with each (base, style) pair resolved once; anything else goes through
    Content.render."""
    base_style = widget.visual_style if base is None else base
    base_rich = base_style.rich_style
    text, spans = content.plain, content.spans
    resolved = _resolver(widget, base_style)
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
                                    _rich(widget, base_style, span.style, resolved)))
        pos = span.end
    else:
        if pos < len(text):
            segments.append(Segment(text[pos:], base_rich))
    # Adjacent runs in one style become one segment: each segment costs an escape sequence.
    merged: list[Segment] = []
    for segment in segments:
        if merged and merged[-1].style == segment.style:
            merged[-1] = Segment(merged[-1].text + segment.text, segment.style)
        else:
            merged.append(segment)
    length = cell_len(text)
    if length < width:
        merged.append(Segment(" " * (width - length), base_rich))
    elif length > width:
        return Strip(merged).adjust_cell_length(width, base_rich)
    return Strip(merged, width)


def parts_strip(widget: Widget, parts: Sequence[tuple[str, str]], width: int) -> Strip:
    """`content_strip` of `Content.assemble(*parts)`, the same segments, without building the
    Content: for the card lines that are drawn again every tick."""
    return Strip(parts_segments(widget, parts, width), width)


def parts_segments(widget: Widget, parts: Sequence[tuple[str, str]],
                   width: int) -> list[Segment]:
    """The segments of `parts_strip`, exactly `width` cells: for a line put together from
    several pieces, made into one Strip."""
    base_style = widget.visual_style
    base_rich = base_style.rich_style
    resolved = _resolver(widget, base_style)
    merged: list[Segment] = []
    last: RichStyle | None = None
    for text, style in parts:
        if not text:
            continue
        rich = resolved.get(style)
        if rich is None:
            rich = _rich(widget, base_style, style, resolved)
        if rich is last:
            merged[-1] = Segment(merged[-1].text + text, rich)
        else:
            merged.append(Segment(text, rich))
            last = rich
    length = cell_len("".join([text for text, _ in parts]))
    if length < width:
        merged.append(Segment(" " * (width - length), base_rich))
    elif length > width:
        return list(Strip(merged).adjust_cell_length(width, base_rich))
    return merged


def part_runs(parts: Sequence[tuple[str, str]], width: int) -> Runs | None:
    """A line of parts as `parts_strip` draws it `width` cells wide: its text, where each run
    of one part ends, and each run's style ("" for the blanks that pad it). None where a cell
    is not a character (one two cells wide) or the line is cut."""
    texts: list[str] = []
    ends: list[int] = []
    run_styles: list[str] = []
    pos = 0
    for text, style in parts:
        if text:
            pos += len(text)
            texts.append(text)
            ends.append(pos)
            run_styles.append(style)
    line = "".join(texts)
    if pos > width or cell_len(line) != pos:
        return None
    if pos < width:
        line += " " * (width - pos)
        ends.append(width)
        run_styles.append("")
    return line, ends, run_styles


def changed_parts(old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]],
                  width: int) -> list[tuple[int, int]] | None:
    """`changed_spans` of the two lines `parts_strip` draws from `old` and `new`, found from
    the parts without drawing them: where a style differs every cell counts, elsewhere the
    characters that differ (two style texts that draw the same count as different). None
    where the lines cannot be compared cell by cell."""
    a, b = part_runs(old, width), part_runs(new, width)
    if a is None or b is None:
        return None
    return changed_runs(a, b, width)


def changed_runs(a: Runs, b: Runs, width: int) -> list[tuple[int, int]]:
    """The changed cells of two lines `width` cells wide given as style runs: walking the two
    lines' runs together, where the styles differ every cell counts, where they agree only the
    characters that differ (one run from the first to the last of them in each stretch)."""
    (a_text, a_ends, a_styles), (b_text, b_ends, b_styles) = a, b
    dirty: list[tuple[int, int]] = []
    if a_ends == b_ends:  # the common case, a figure that changed within its run: run by run
        pos = 0
        for end, a_style, b_style in zip(a_ends, a_styles, b_styles):
            if a_style is not b_style and a_style != b_style:
                add_run(dirty, pos, end)
            elif a_text[pos:end] != b_text[pos:end]:
                _add_changed_characters(dirty, a_text, b_text, pos, end)
            pos = end
        return dirty
    i = j = pos = 0
    while pos < width:
        end = min(a_ends[i], b_ends[j])
        if a_styles[i] != b_styles[j]:
            add_run(dirty, pos, end)
        elif a_text[pos:end] != b_text[pos:end]:
            _add_changed_characters(dirty, a_text, b_text, pos, end)
        pos = end
        if pos == a_ends[i] and i + 1 < len(a_ends):
            i += 1
        if pos == b_ends[j] and j + 1 < len(b_ends):
            j += 1
    return dirty


def _add_changed_characters(dirty: list[tuple[int, int]], a_text: str, b_text: str, start: int,
                            end: int) -> None:
    """Adds to `dirty` the run from the first to the last character that differ in
    [start, end), where some do."""
    first, last = start, end - 1
    while a_text[first] == b_text[first]:
        first += 1
    while a_text[last] == b_text[last]:
        last -= 1
    add_run(dirty, first, last + 1)


# Whether Textual's ANSIToTruecolor filter leaves a style as it is (it changes colours that are
# not RGB, and dims), by style: the styles of the lines here come from the theme, RGB. Looked up
# by the style's identity, the style kept beside the answer so that its identity stays its own:
# the lines share a few style objects, and hashing and comparing Rich styles is Python code,
# for every segment of every line drawn.
_TRUECOLOR: dict[int, tuple[RichStyle, bool]] = {}


def _is_truecolor(style: RichStyle | None) -> bool:
    if style is None:
        return True
    found = _TRUECOLOR.get(id(style))
    if found is not None and found[0] is style:
        return found[1]
    if len(_TRUECOLOR) > 1024:
        _TRUECOLOR.clear()
    color, bgcolor = style.color, style.bgcolor
    truecolor = ((color is None or color.triplet is not None)
                 and (bgcolor is None or bgcolor.triplet is not None)
                 and not (style.dim and color is not None))
    _TRUECOLOR[id(style)] = (style, truecolor)
    return truecolor


# The styles found to pass the truecolor filter unchanged, by identity, each kept alive so
# that its identity stays its own: whether a line's styles all are is a lookup a segment, made
# without running Python code for each.
_TRUECOLOR_IDS: dict[int, RichStyle | None] = {}
_STYLE = itemgetter(1)  # a Segment's style


def _all_truecolor(strip: Strip) -> bool:
    """Whether the truecolor filter leaves every style of `strip` as it is."""
    known = _TRUECOLOR_IDS
    if all(map(known.__contains__, map(id, map(_STYLE, strip)))):
        return True
    for segment in strip:
        style = segment.style
        if id(style) not in known:
            if not _is_truecolor(style):
                return False
            if len(known) > 1024:
                known.clear()
            known[id(style)] = style
    return True


def apply_filters(strip: Strip, filters: list[LineFilter], background: Color) -> Strip:
    """`strip` through the app's line filters (NO_COLOR, the ANSI theme's colours), as Textual
    puts every line through them; the truecolor filter, which the app has on all the time, is
    skipped where it would change nothing (a new Strip for the same segments)."""
    for line_filter in filters:
        if type(line_filter) is ANSIToTruecolor and _all_truecolor(strip):
            continue
        strip = strip.apply_filter(line_filter, background)
    return strip


# Unchanged cells between two changed runs that are cheaper to send again than to skip: moving
# the cursor and restarting a style costs about as many bytes.
MERGE_GAP = 8


def changed_spans(old: Strip | None, new: Strip) -> list[tuple[int, int]]:
    """The runs of cells [start, end) where `new` differs from `old` (text or style), left to
    right: within a run of one style, from its first changed character to its last; runs closer
    than MERGE_GAP cells are one. [] when nothing changed; the whole line when the two cannot
    be compared cell by cell (another width, a character two cells wide)."""
    width = new.cell_length
    whole = [(0, width)] if width else []
    if old is None or old.cell_length != width:
        return whole
    a_runs, b_runs = _strip_runs(old, forget=True), _strip_runs(new)
    if a_runs == b_runs:  # the same segments
        return []
    if len(a_runs[0]) != width or len(b_runs[0]) != width:
        return whole
    return changed_runs(a_runs, b_runs, width)


# The runs of the lines `changed_spans` was last given as new, by identity, each kept with its
# line: a line on screen is the old one of the next comparison, and is not cut into runs again.
_RUNS: dict[int, tuple[Strip, Runs]] = {}


def _strip_runs(strip: Strip, forget: bool = False) -> Runs:
    """`strip` as runs, one a segment; `forget`: it will not be compared again."""
    key = id(strip)
    found = _RUNS.pop(key, None) if forget else _RUNS.get(key)
    if found is not None and found[0] is strip:
        return found[1]
    runs = _segment_runs(list(strip))
    if not forget:
        if len(_RUNS) >= 512:  # lines of widgets that went away
            _RUNS.clear()
        _RUNS[key] = (strip, runs)
    return runs


def _segment_runs(segments: list[Segment]) -> Runs:
    ends: list[int] = []
    pos = 0
    for segment in segments:
        pos += len(segment.text)
        ends.append(pos)
    return "".join([s.text for s in segments]), ends, [s.style for s in segments]


def add_run(runs: list[tuple[int, int]], start: int, end: int) -> None:
    """Appends the changed cells [start, end) to `runs` (left to right), joined to the last run
    where that is cheaper to send (see MERGE_GAP and textual_private.installed)."""
    if runs and (start - runs[-1][1] < MERGE_GAP or not textual_private.installed()):
        runs[-1] = (runs[-1][0], end)
    else:
        runs.append((start, end))


def border_label_spans(old: Content | None, new: Content | None,
                       width: int) -> list[tuple[int, int]]:
    """The cells of a `width`-cell border line that change when its left-aligned label (title
    or subtitle) goes from `old` to `new`. Textual draws the label one cell after the corner,
    padded with a space each side: "╭─ label ───╮". A label that does not leave room for that,
    or with characters two cells wide, counts as the whole line."""
    inner = width - 2
    cells: list[list[tuple[str, str]]] = []
    for label in (old, new):
        line = [("", "")] * inner
        if label is not None and label.plain:
            text = label.plain
            if len(text) + 3 > inner or cell_len(text) != len(text):
                return [(0, width)] if width > 0 else []
            styles = [""] * len(text)
            for span in label.spans:
                for k in range(max(0, span.start), min(len(text), span.end)):
                    styles[k] += f"|{span.style}"
            line[1: len(text) + 3] = [(" ", ""), *zip(text, styles), (" ", "")]
        cells.append(line)
    runs: list[tuple[int, int]] = []
    for x, (a, b) in enumerate(zip(*cells), start=1):
        if a != b:
            add_run(runs, x, x + 1)
    return runs


class Frame:
    """What a line-API widget keeps of Textual's drawing of it (`framed_lines`): its border and
    padding lines (`edges`, drawn again where `stale`: a border title changed) and the cells
    left and right of the content on a content line; and each content line set in them, with
    the line it was made from."""

    def __init__(self, size: Size, top: int, width: int, edges: dict[int, Strip], left: Strip,
                 right: Strip, filters: list[LineFilter], background: Color) -> None:
        self.size = size
        self.top = top
        self.width = width  # of the content
        self.edges = edges
        self.stale: set[int] = set()
        self.left = left
        self.right = right
        self.filters = filters
        self.background = background
        self.lines: dict[int, tuple[Strip, Strip]] = {}

    @classmethod
    def draw(cls, widget: Widget, size: Size,
             render: Callable[[Region], list[Strip]]) -> Frame | None:
        """Textual draws the whole widget; None where it has no content line to frame. Beside
        the content: the border, the padding and the room of a scrollbar."""
        gutter = widget.gutter
        width, height = size
        content = width - gutter.width
        rows = range(gutter.top, height - gutter.bottom)
        if content <= 0 or not rows:
            return None
        strips = render(size.region)
        sample = strips[gutter.top]
        edges = {y: strip for y, strip in enumerate(strips) if y not in rows}
        return cls(size, gutter.top, content, edges, sample.crop(0, gutter.left),
                   sample.crop(width - gutter.right, width), list(widget.get_line_filters()),
                   widget.background_colors[1])

    def line(self, content_line: Callable[[int, int], Strip], y: int) -> Strip:
        edge = self.edges.get(y)
        if edge is not None:
            return edge
        content = content_line(y - self.top, self.width)
        kept = self.lines.get(y)
        if kept is not None and kept[0] is content:
            return kept[1]
        filtered = apply_filters(content, self.filters, self.background)
        line = Strip([*self.left, *filtered, *self.right], self.size.width)
        self.lines[y] = (content, line)
        return line


def framed_lines(widget: Widget, frame: Frame | None, crop: Region,
                 content_line: Callable[[int, int], Strip],
                 render: Callable[[Region], list[Strip]]) -> tuple[Frame | None, list[Strip]]:
    """`widget.render_lines(crop)` for a line-API widget whose lines change often: its content
    lines (`content_line(y, width)`) set in the `frame` it keeps of Textual's drawing (`render`,
    Textual's own `render_lines`), drawn anew when there is none or the size changed. The frame
    to keep, and the lines.

    Textual's own path (the widget's styles cache) draws the border and the padding around
    every content line again whenever the line changed, then runs the app's line filters over
    the result: several times the cost of the line itself, for every GPU card and the header
    each tick. The widget drops its frame where Textual draws it all again: a refresh of the
    whole widget, a change of styles."""
    size = widget.outer_size
    if frame is None or frame.size != size:
        frame = Frame.draw(widget, size, render)
        if frame is None:
            return None, render(crop)
    elif frame.stale:  # border lines whose labels changed: drawn by Textual again
        for y in frame.stale:
            frame.edges[y] = render(Region(0, y, size.width, 1))[0]
        frame.stale.clear()
    lines = [frame.line(content_line, y) for y in crop.line_range]
    if crop.width != size.width:
        x1, x2 = crop.column_span
        lines = [line.crop(x1, x2) for line in lines]
    return frame, lines


class KeepsFrame:
    """A mix-in, before the Widget in its bases, for a line-API widget whose lines change often:
    it draws through `framed_lines`, its content lines from `_content_line(y, width)`, and
    drops the frame it keeps where Textual draws all of it again (a refresh of the whole
    widget; a change of styles, which the widget's `notify_style_update` says)."""

    _frame: Frame | None = None

    def _content_line(self, y: int, width: int) -> Strip:
        raise NotImplementedError

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame, lines = framed_lines(
            self, self._frame, crop, self._content_line,  # type: ignore[arg-type]
            super().render_lines)  # type: ignore[misc]
        return lines

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        if not regions and repaint:
            self._frame = None  # all of it drawn by Textual again
        return super().refresh(  # type: ignore[misc,no-any-return]
            *regions, repaint=repaint, layout=layout, recompose=recompose)
