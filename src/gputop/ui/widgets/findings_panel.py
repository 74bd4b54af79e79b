"""Findings from the diagnostics engine, most severe first; hidden when there are none.

It takes any objects with `.severity`, `.title` and `.detail`, so it does not depend on the
engine's classes. In a replay (`times`) each line also says when the finding was shown and when
its condition began (`.opened`, `.since`), which a recording seen after the fact needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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


class FindingsPanel(Static):
    DEFAULT_CSS = """
    FindingsPanel {
        height: auto;
        max-height: 6;
        border-top: solid $foreground 30%;
        border-title-align: left;
        border-title-color: $foreground;
        display: none;
        overflow-y: auto;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    FindingsPanel.-shown {
        display: block;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.findings: list[Any] = []
        self.times = False  # a replay: say when each finding was shown and its condition began
        self._shown: tuple[tuple[str, str, str, str], ...] = ()

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
        # One line a finding: while their number stays, so does the panel's height, and a new
        # figure in a finding repaints the panel without laying out the screen again.
        resized = len(key) != len(self._shown)
        self._shown = key
        if resized:
            self.border_title = Content(f"Findings ({len(found)})")
        self.update(Content("\n").join(finding_line(f, times=self.times) for f in found),
                    layout=resized)
        self.set_class(bool(found), "-shown")
