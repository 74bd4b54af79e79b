"""The screens of `gputop replay`: the dashboard with the replay keys in its footer, and the box
`g` opens to type where to go (a mistake is said in the box, which stays open)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gputop.replay.control import ReplayControl
from gputop.replay.seek import SeekError, parse_seek
from gputop.ui.screens.dashboard import APP_ACTIONS, DashboardScreen
from gputop.ui.view import styles
from gputop.ui.view.keys import APP_KEYS


class ReplayDashboardScreen(DashboardScreen):
    """The dashboard, whose footer leaves room for the replay keys (the app's): its own keys
    still work and are in the help."""

    BINDINGS = [Binding(k.keys, k.action, k.description, show=False)
                for k in APP_KEYS if k.action and k.action not in APP_ACTIONS]


class SeekScreen(ModalScreen[int | None]):
    """Dismissed with the tick to go to, or None."""

    DEFAULT_CSS = """
    SeekScreen {
        align: center middle;
    }
    SeekScreen > Vertical {
        width: 64;
        max-width: 100%;
        height: auto;
        border: round $accent;
        border-title-align: center;
        background: $surface;
        padding: 0 1;
    }
    SeekScreen Input {
        border: none;
        height: 1;
        padding: 0 1;
        background: $boost;
    }
    SeekScreen #seek-error {
        color: $text-error;
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]

    def __init__(self, control: ReplayControl) -> None:
        super().__init__()
        self.control = control
        self.input = Input(placeholder="10:04:20, -5m, +90s, 260, start, end", id="seek-input")
        self.input.cursor_blink = False
        self.error = Static("", id="seek-error")

    def compose(self) -> ComposeResult:
        box = Vertical()
        box.border_title = "Go to"
        with box:
            yield Static(Content(self.control.span_text()).stylize(styles.LABEL))
            yield self.input
            yield self.error

    def on_mount(self) -> None:
        self.input.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            tick = parse_seek(event.value, self.control.times, self.control.position)
        except SeekError as e:
            self.error.update(Content(str(e)))
            return
        self.dismiss(tick)

    def action_cancel(self) -> None:
        self.dismiss(None)
