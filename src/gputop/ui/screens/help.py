"""Every key, and what the glyphs and words on the dashboard mean."""

from __future__ import annotations

import textwrap

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.events import Resize
from textual.screen import ModalScreen
from textual.widgets import Static

from gputop.ui.view import styles
from gputop.ui.view.keys import (
    APP_KEYS,
    FLEET_KEYS,
    FLEET_OTHER_KEYS,
    LEGEND,
    OTHER_KEYS,
    REPLAY_KEYS,
)


def key_lines(title: str, rows: list[tuple[str, str]], width: int) -> list[Content]:
    return [Content(title).stylize("bold $accent"),
            *(Content.assemble((k.ljust(width), "bold"), (h, "")) for k, h in rows)]


def fleet_help_content() -> Content:
    rows = [(k.display or k.keys, k.help) for k in FLEET_KEYS] + list(FLEET_OTHER_KEYS)
    return Content("\n").join(key_lines("Keys", rows, max(len(k) for k, _ in rows) + 2))


def help_content(replay: bool = False, width: int | None = None) -> Content:
    """Every key and glyph with what it does. Given a `width`, a description too long for it
    goes on under itself, on the next lines, instead of being cut."""
    rows: list[tuple[str, str]] = [(k.display or k.keys, k.help) for k in APP_KEYS]
    rows += list(OTHER_KEYS)
    replay_rows = [(k.display or k.keys, k.help) for k in REPLAY_KEYS] if replay else []
    key_width = max(len(k) for k, _ in [*rows, *replay_rows, *LEGEND]) + 2
    room = None if width is None else max(12, width - key_width)

    def entry(key: str, text: str, style: str = "") -> list[Content]:
        parts = [text]
        if room is not None and len(text) > room:
            parts = textwrap.wrap(text, room, break_on_hyphens=False)
        return [Content.assemble((key.ljust(key_width) if i == 0 else " " * key_width, "bold"),
                                 (part, style)) for i, part in enumerate(parts)]

    lines = [Content("Keys").stylize("bold $accent")]
    lines += [line for k, h in rows for line in entry(k, h)]
    if replay_rows:
        lines += [Content(""), Content("Replay").stylize("bold $accent")]
        lines += [line for k, h in replay_rows for line in entry(k, h)]
    lines += [Content(""), Content("On the dashboard").stylize("bold $accent")]
    lines += [line for k, h in LEGEND for line in entry(k, h, styles.LABEL)]
    return Content("\n").join(lines)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: auto;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-align: center;
        background: $surface;
        padding: 0 1;
    }
    HelpScreen Static {
        width: auto;
    }
    """
    BINDINGS = [
        Binding("escape,question_mark", "close", "Close", show=False),
        Binding("q", "app.quit", "Quit", show=False),  # a dialog hides the app's own keys
    ]

    def __init__(self, *, replay: bool = False, content: Content | None = None,
                 title: str = "gputop help") -> None:
        """`content`: what to show instead of the dashboard's keys (the fleet's)."""
        super().__init__()
        self.replay = replay
        self.content = content
        self.title_text = title

    def compose(self) -> ComposeResult:
        box = VerticalScroll()
        box.border_title = self.title_text
        with box:
            yield Static(self.content if self.content is not None
                         else help_content(self.replay), id="help-text")

    def on_resize(self, event: Resize) -> None:
        if self.content is not None:
            return
        # The box's border and padding, and the scrollbar it shows when the text is taller.
        room = event.size.width - 4 - 2
        self.query_one("#help-text", Static).update(help_content(self.replay, room))

    def action_close(self) -> None:
        self.dismiss(None)
