"""What the screens ask of the app. A screen posts one of these and it bubbles up to the app,
which acts on it: screens never call the app, so they import nothing of it."""

from __future__ import annotations

from textual.message import Message

from gputop.model import ProcessSample


class Say(Message):
    """Tell the user something (as text, never markup): a notification, kept in the app's log."""

    def __init__(self, text: str, severity: str = "information") -> None:
        super().__init__()
        self.text = text
        self.severity = severity


class KillRequested(Message):
    """The user asked to kill this GPU process: the app checks the policy and asks to confirm."""

    def __init__(self, proc: ProcessSample) -> None:
        super().__init__()
        self.proc = proc


class DetailRequested(Message):
    """Open the detail view of the GPU with this index."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index


class TopologyRequested(Message):
    """Open the topology view."""
