"""Every key, and what the glyphs and words on the dashboard mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
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


def help_content(replay: bool = False) -> Content:
    rows: list[tuple[str, str]] = [(k.display or k.keys, k.help) for k in APP_KEYS]
    rows += list(OTHER_KEYS)
    replay_rows = [(k.display or k.keys, k.help) for k in REPLAY_KEYS] if replay else []
    width = max(len(k) for k, _ in [*rows, *replay_rows, *LEGEND]) + 2
    lines = [Content("Keys").stylize("bold $accent")]
    lines += [Content.assemble((k.ljust(width), "bold"), (h, "")) for k, h in rows]
    if replay_rows:
        lines += [Content(""), Content("Replay").stylize("bold $accent")]
        lines += [Content.assemble((k.ljust(width), "bold"), (h, "")) for k, h in replay_rows]
    lines += [Content(""), Content("On the dashboard").stylize("bold $accent")]
    lines += [Content.assemble((k.ljust(width), "bold"), (h, styles.LABEL)) for k, h in LEGEND]
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
                         else help_content(self.replay))

    def action_close(self) -> None:
        self.dismiss(None)
