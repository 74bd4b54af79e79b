"""A widget that shows one line of Content and repaints only the cells that changed.

Drawn through the line API: a one-line Content needs no wrapping, and skipping Textual's general
text pipeline makes the line several times cheaper to paint. When the text changes, the new line
is compared with the one on screen and only the cells that differ are repainted, so a clock that
ticks sends two cells to the terminal, not the whole line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from gputop.ui import textual_private
from gputop.ui.render import KeepsFrame, changed_spans, content_strip, parts_strip

if TYPE_CHECKING:
    pass


def same(a: Content | None, b: Content | None) -> bool:
    """Equal text *and* styles (Content's own == compares the text only)."""
    if a is None or b is None:
        return a is b
    return a.plain == b.plain and list(a.spans) == list(b.spans)


class TextLine(KeepsFrame, textual_private.RepaintsNow, Widget):
    """Fixed-size text that changes often. `set` is a no-op when nothing changed, and never
    asks for a layout pass: the CSS gives the widget its size."""

    DEFAULT_CSS = """
    TextLine {
        height: 1;
        width: 1fr;
    }
    """

    repaints_now = False  # a line that changes as a tick is shown (textual_private.repaint_now)

    def __init__(self, content: Content | None = None, *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._content: Content | None = content or Content("")
        self._parts: tuple[tuple[str, str], ...] | None = None  # what `set_parts` was given
        self._strip: Strip | None = None

    @property
    def content(self) -> Content:
        if self._content is None:
            assert self._parts is not None
            self._content = Content.assemble(*self._parts)
        return self._content

    def set(self, content: Content) -> bool:
        """Show `content`; True when it differed from what was shown."""
        if same(content, self.content):
            return False
        self._content = content
        self._parts = None
        return self._repaint()

    def set_parts(self, parts: tuple[tuple[str, str], ...]) -> bool:
        """`set(Content.assemble(*parts))` for a line made again every tick, drawn from the
        parts (`render.parts_strip`) without building the Content; at most as many cells as
        the widget is wide (a longer line is cut by `set`)."""
        if parts == self._parts:
            return False
        self._parts = parts
        self._content = None
        return self._repaint()

    def _repaint(self) -> bool:
        width = self.size.width
        if not self.is_mounted or not width or self._strip is None:
            self._strip = None
            self.refresh()
            return True
        new = self.make_strip(width)
        spans = changed_spans(self._strip, new)
        self._strip = new
        if spans:
            regions = [Region(x1, 0, x2 - x1, 1) for x1, x2 in spans]
            if self.repaints_now:
                textual_private.repaint_now(self, *regions)
            else:
                self.refresh(*regions)
        return True

    def make_strip(self, width: int) -> Strip:
        """The line as painted; subclasses may cut or decorate it."""
        if self._parts is not None:
            return parts_strip(self, self._parts, width)
        return content_strip(self, self.content, width)

    def render_line(self, y: int) -> Strip:
        return self._content_line(y, self.size.width)

    def _content_line(self, y: int, width: int) -> Strip:
        if y:
            return Strip.blank(width, self.visual_style.rich_style)
        if self._strip is None or self._strip.cell_length != width:
            self._strip = self.make_strip(width)
        return self._strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strip = None
        self._frame = None
