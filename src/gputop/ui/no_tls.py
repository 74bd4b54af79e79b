"""Importing this module loads asyncio without OpenSSL, unless something loaded either already.

asyncio imports `ssl` when it is imported, in case a connection wants TLS; that loads OpenSSL,
about 5 MiB resident for as long as the dashboard runs. The dashboard opens no TLS connection
(Textual's drivers talk to a terminal or to textual-serve over a pipe), so `ui.app` imports
this first: asyncio then sees no ssl module, as on a Python built without it. Anything that
imports `ssl` later (urllib for https, say) loads it as usual; only asyncio's own TLS is off
in that process."""

from __future__ import annotations

import sys


def _load() -> None:
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # "import ssl" raises ImportError
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


_load()
