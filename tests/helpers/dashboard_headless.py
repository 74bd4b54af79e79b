"""Runs `gputop ARGS...` with its dashboard on Textual's headless driver (the one Pilot uses), as
if in a 120x40 terminal: after SECONDS it saves the screen as SVG to SCREEN and presses q.

    python dashboard_headless.py SECONDS SCREEN ARGS...

Everything else is gputop's own path (`gputop.commands.main.main`): its feeds, its errors, its
exit status.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gputop.commands import main as gputop_main
from gputop.ui.app import GputopApp


def main() -> int:
    seconds, screen, argv = float(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    run = GputopApp.run

    def headless(self: GputopApp, *, mouse: bool | None = None, **_: Any) -> Any:
        async def pilot(p: Any) -> None:
            await p.pause(seconds)
            screen.write_text(self.export_screenshot(), encoding="utf-8")
            await p.press("q")

        return run(self, mouse=mouse, headless=True, size=(120, 40), auto_pilot=pilot)

    GputopApp.run = headless  # type: ignore[method-assign]
    # gputop opens the dashboard only for a terminal; the headless driver is one.
    sys.stdin.isatty = sys.stdout.isatty = lambda: True  # type: ignore[method-assign]
    return gputop_main.main(argv)


if __name__ == "__main__":
    sys.exit(main())
