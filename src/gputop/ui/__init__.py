"""The terminal UI: the only package that imports Textual and Rich.

`ui.view` holds what the screens show, worked out without Textual (formatting, status, keys,
process rows, the plain table of `--once`), so importing it (or this package) does not load
Textual; `GputopApp` is imported from `ui.app` on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp

__all__ = ["GputopApp"]


def __getattr__(name: str) -> Any:
    if name == "GputopApp":
        from gputop.ui.app import GputopApp

        return GputopApp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
