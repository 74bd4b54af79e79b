"""`--web [HOST:PORT]`: the dashboard (or replay, or fleet) in a browser, on loopback by default.

Served by Textual's own `textual-serve` (the `web` extra): each browser tab runs its own gputop
with the same arguments, under Textual's web driver, and the page is a terminal drawn by
xterm.js. The child sees `GPUTOP_WEB` and runs its dashboard although its stdout is no terminal
(where gputop would otherwise print one snapshot and exit)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from gputop.errors import GputopError

WEB_ENV = "GPUTOP_WEB"
DEFAULT_WEB = ("127.0.0.1", 8000)  # textual-serve's port, on loopback


def in_browser() -> bool:
    """This gputop is one a browser tab started: draw the dashboard for Textual's web driver."""
    return bool(os.environ.get(WEB_ENV)) and "WebDriver" in os.environ.get("TEXTUAL_DRIVER", "")


def serve(argv: Sequence[str], address: tuple[str, int], title: str, err: TextIO) -> int:
    """Serve `gputop ARGV` (its own argv, `--web` included: the child ignores it) until Ctrl-C."""
    try:
        from textual_serve.server import Server
    except ImportError:
        raise GputopError("--web needs textual-serve",
                          hint="pip install 'gputop-ml[web]'") from None

    host, port = address
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"

    class GputopServer(Server):
        async def on_startup(self, app: Any) -> None:  # one line instead of a banner
            err.write(f"gputop: {title} at {url}/ (each browser tab runs its own; Ctrl-C to "
                      "stop)\n")
            err.flush()

    os.environ[WEB_ENV] = "1"  # the children inherit it
    import shlex  # only here: every start of gputop imports this module

    command = shlex.join([sys.executable, "-m", "gputop", *argv])
    server = GputopServer(command, host=host, port=port, title=title, public_url=url)
    try:
        server.serve()
    except OSError as e:
        raise GputopError(f"cannot serve on {shown}:{port}: {e.strerror or e}") from None
    return 0
