"""Untrusted text made safe to show in the dashboard.

Process names, command lines, user names, container labels and even GPU names come from outside
gputop. They are shown as text: never parsed as markup (Rich `Text` / Textual `Content` built
from plain strings, never markup strings), and never passed to the terminal as control sequences
(control, bidi-override and surrogate characters become visible escapes such as `\\x1b`, the
same ones the one-shot table output uses)."""

from __future__ import annotations

from rich.text import Text
from textual.content import Content

from gputop.safetext import printable

MAX_LENGTH = 1000  # a 100 kB command line is not useful in a cell and costs to lay out


def sanitize(value: object, max_length: int = MAX_LENGTH) -> str:
    """`value` as a one-line string with every control character shown as an escape."""
    s = value if isinstance(value, str) else str(value)
    if len(s) > max_length:
        s = s[: max_length - 1] + "…"
    return printable(s)


def safe_text(value: object, style: str = "", max_length: int = MAX_LENGTH) -> Text:
    """A Rich `Text` showing `value` literally: no markup, no terminal escapes."""
    return Text(sanitize(value, max_length), style=style, end="", no_wrap=True)


def safe_content(value: object, style: str = "", max_length: int = MAX_LENGTH) -> Content:
    """The same as `safe_text`, as Textual `Content` (whose styles may name theme variables)."""
    content = Content(sanitize(value, max_length))
    return content.stylize(style) if style else content
