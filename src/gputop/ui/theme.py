"""The colour theme: `--theme` or the config file's `theme`, else `--ansi`, else Textual's dark.

`dark` and `light` name the themes made for a dark and a light terminal background; any Textual
theme works by its name (`nord`, `solarized-light`, `ansi-light` for the 16 colours of a light
terminal, ...). An unknown name is said in one line with the names there are."""

from __future__ import annotations

from textual.app import App

from gputop.errors import GputopError

ALIASES = {"dark": "textual-dark", "light": "textual-light"}


def apply_theme(app: App[None], theme: str | None, ansi: bool) -> None:
    name = ALIASES.get(theme or "", theme) or ("ansi-dark" if ansi else None)
    if name is None:
        return
    if name not in app.available_themes:
        names = ", ".join(sorted([*ALIASES, *app.available_themes]))
        raise GputopError(f"no theme {theme!r}", hint=f"themes: {names}")
    app.theme = name
