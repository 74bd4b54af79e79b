"""Content styles in theme variables, shared by the cards, the rows and the views.

Theme variables (not colours) so the 16-colour ANSI theme and NO_COLOR get sensible output; every
state that a colour marks also has a word or a glyph."""

from __future__ import annotations

from gputop.ui.view.status import CRITICAL, INFO, WARNING

MUTED = "$foreground-muted"
LABEL = "$foreground-muted"
UTIL = "$text-primary"
MEMORY = "$text-success"
POWER = "$text-secondary"
OK = "$text-success"

# Badges are reversed text: the chip takes the colour and the word takes the background. That
# reads the same in truecolor, in the 16-colour ANSI theme (where a "muted" background and its
# text can be the very same palette entry) and under NO_COLOR (inverse video).
BADGE = {
    INFO: "reverse $text-primary",
    WARNING: "bold reverse $text-warning",
    CRITICAL: "bold reverse $text-error",
}
TEXT = {
    INFO: "$text-primary",
    WARNING: "bold $text-warning",
    CRITICAL: "bold $text-error",
}


def badge_style(severity: str) -> str:
    return BADGE.get(severity, "")


def text_style(severity: str | None) -> str:
    return TEXT.get(severity or "", "")
