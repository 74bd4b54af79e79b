"""Findings from the diagnostics engine, most severe first; hidden when there are none.

It takes any objects with `.severity`, `.title` and `.detail`, so it does not depend on the
engine's classes. In a replay (`times`) each line also says when the finding was shown and when
its condition began (`.opened`, `.since`), which a recording seen after the fact needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.binding import Binding
from textual.content import Content
from textual.widgets import Static

from gputop.ui.text import safe_content
from gputop.ui.view import styles
from gputop.ui.view.format import clock_time
from gputop.ui.view.status import CROSS

_GLYPHS = {"critical": CROSS, "warning": "▲", "info": "●"}
_RANK = {"critical": 0, "warning": 1, "info": 2}


def finding_times(f: Any) -> str:
    """"shown 10:04:20, began 10:03:10" where the finding says both; else ""."""
    opened, since = getattr(f, "opened", None), getattr(f, "since", None)
    if not isinstance(opened, (int, float)) or not isinstance(since, (int, float)):
        return ""
    return f"shown {clock_time(opened)}, began {clock_time(since)}"


def finding_line(f: Any, *, times: bool = False) -> Content:
    sev = str(getattr(f, "severity", "info")).lower()
    glyph = _GLYPHS.get(sev, "●")
    detail = getattr(f, "detail", "")
    parts: list[Content | tuple[str, str] | str] = [
        (f" {glyph} {sev.upper()} ", styles.badge_style(sev) or styles.badge_style("info")),
        " ",
        safe_content(getattr(f, "title", ""), "bold", max_length=200),
    ]
    when = finding_times(f) if times else ""
    if when:
        parts += [("  ", ""), (when, styles.LABEL)]
    if detail:
        parts += [("  ", ""), safe_content(detail, styles.LABEL, max_length=400)]
    return Content.assemble(*parts)


MAX_LINES = 5  # findings in view; more scroll (Tab to the panel, then the arrows)


class FindingsPanel(Static, can_focus=True):
    DEFAULT_CSS = """
    FindingsPanel {
        height: auto;
        border-top: solid $foreground 30%;
        border-title-align: left;
        border-title-color: $foreground;
        display: none;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    FindingsPanel.-shown {
        display: block;
    }
    FindingsPanel:focus {
        border-top: solid $accent;
    }
    """
    BINDINGS = [
        Binding("up", "scroll_findings(-1)", "Up", show=False),
        Binding("down", "scroll_findings(1)", "Down", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.findings: list[Any] = []
        self.times = False  # a replay: say when each finding was shown and its condition began
        self._shown: tuple[tuple[str, str, str, str], ...] = ()
        self._top = 0  # the first finding in view

    def set_findings(self, findings: Iterable[Any]) -> None:
        """Show `findings`. The engine hands them over every tick, mostly unchanged: then this
        costs a comparison, not a layout and a repaint."""
        found = sorted(findings, key=lambda f: _RANK.get(str(getattr(f, "severity", "")), 3))
        key = tuple((str(getattr(f, "severity", "")), str(getattr(f, "title", "")),
                     str(getattr(f, "detail", "")), finding_times(f) if self.times else "")
                    for f in found)
        self.findings = found
        if key == self._shown:
            return
        # One line a finding, at most MAX_LINES: while their number stays, so does the panel's
        # height, and a new figure in a finding repaints the panel without laying out the
        # screen again.
        resized = min(len(key), MAX_LINES) != min(len(self._shown), MAX_LINES)
        self._shown = key
        self._show(layout=resized)
        self.set_class(bool(found), "-shown")
        self.can_focus = bool(found)

    def _show(self, layout: bool = False) -> None:
        count = len(self.findings)
        self._top = max(0, min(self._top, count - MAX_LINES))
        self.border_title = title(count, self._top)
        lines = self.findings[self._top:self._top + MAX_LINES]
        self.update(Content("\n").join(finding_line(f, times=self.times) for f in lines),
                    layout=layout)

    def action_scroll_findings(self, step: int) -> None:
        self._top += step
        self._show()

    @property
    def rows(self) -> int:
        """Rows of the screen it takes."""
        return 1 + min(MAX_LINES, len(self._shown)) if self._shown else 0


def title(count: int, top: int = 0) -> Content:
    """"Findings (6)", and when some are out of view, how many and how to reach them."""
    if count <= MAX_LINES:
        return Content(f"Findings ({count})")
    above, below = top, count - top - MAX_LINES
    hint = ", ".join(part for part in (f"{above} above" if above else "",
                                       f"{below} more below" if below else "") if part)
    return Content.assemble(f"Findings ({count}) ",
                            (f"{hint}: Tab here, ↑ ↓", styles.LABEL))
