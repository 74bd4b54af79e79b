"""The warnings of the latest snapshot (a GPU lost, a slow poll), and the feed's own trouble,
on one line under the header; hidden when there are none."""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.strip import Strip

from gputop.ui.render import content_strip
from gputop.ui.text import safe_content
from gputop.ui.view import styles
from gputop.ui.widgets.text_line import TextLine


def warnings_content(warnings: Sequence[str]) -> Content:
    sep = Content(" · ").stylize(styles.LABEL)
    body = sep.join(safe_content(w, max_length=300) for w in warnings)
    return Content.assemble(("▲ ", styles.text_style("warning")), body)


class WarningBar(TextLine):
    DEFAULT_CSS = """
    WarningBar {
        padding: 0 1;
        color: $text-warning;
        text-style: reverse;  /* readable in the ANSI theme and under NO_COLOR too */
        display: none;
    }
    WarningBar.-shown {
        display: block;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.warnings: tuple[str, ...] = ()

    def set_warnings(self, warnings: Sequence[str]) -> None:
        warnings = tuple(warnings)
        if warnings == self.warnings:
            return
        self.warnings = warnings
        self.set(warnings_content(warnings) if warnings else Content(""))
        self.set_class(bool(warnings), "-shown")  # a layout change, but only on change

    def make_strip(self, width: int) -> Strip:
        return content_strip(self, self.content.truncate(max(0, width), ellipsis=True), width)
