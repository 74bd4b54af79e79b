"""Asks before a process is signalled. Cancel is focused, so Enter alone never kills."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gputop.model import ProcessSample
from gputop.ui.text import safe_content
from gputop.ui.view import format as fmt
from gputop.ui.view import styles


def prompt(proc: ProcessSample, grace: float) -> Content:
    who = fmt.label(proc.user)
    return Content.assemble(
        ("Kill PID ", ""), (str(proc.pid), "bold"), (" on GPU ", ""),
        (str(proc.device_index), "bold"), (" (user ", ""), safe_content(who, "bold"), (")?\n", ""),
        safe_content(fmt.command(proc.cmdline, proc.name), styles.LABEL, max_length=300),
        (f"\n\nSIGTERM now; SIGKILL if still running {grace:.0f} s later.", styles.LABEL),
    )


class KillScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    KillScreen {
        align: center middle;
    }
    KillScreen > Vertical {
        width: 64;
        max-width: 100%;
        height: auto;
        border: heavy $error;
        border-title-align: center;
        background: $surface;
        padding: 0 1;
    }
    KillScreen Static {
        width: 1fr;
    }
    KillScreen Horizontal {
        height: auto;
        align: right middle;
        margin-top: 1;
    }
    KillScreen Button {
        margin-left: 2;
    }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Kill", show=False),
        Binding("n,escape", "answer(False)", "Keep", show=False),
    ]

    def __init__(self, proc: ProcessSample, grace: float) -> None:
        super().__init__()
        self.proc = proc
        self.grace = grace

    def compose(self) -> ComposeResult:
        box = Vertical()
        box.border_title = "Kill process"
        with box:
            yield Static(prompt(self.proc, self.grace), id="kill-prompt")
            with Horizontal():
                yield Button("Kill  (y)", variant="error", id="kill-yes")
                yield Button("Keep  (n)", variant="default", id="kill-no")

    def on_mount(self) -> None:
        self.query_one("#kill-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "kill-yes")

    def action_answer(self, kill: bool) -> None:
        self.dismiss(kill)
