"""When the moments of a log without times are taken, and how the warning says so."""

from __future__ import annotations

import time
from collections.abc import Collection

START, INTERVAL = "--start", "--interval"


def moments_taken(start: float, interval: float, given: Collection[str] = ()) -> str:
    """"moments are taken 2 s apart from 2024-05-01 12:00:00 UTC", and where those come from:
    the flags named in `given` (of --start and --interval) were set by the user; the others are
    the defaults, and the warning says how to set them."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start))
    said = f"moments are taken {interval:g} s apart from {stamp} UTC"
    if START in given and INTERVAL in given:
        return f"{said}, as --start and --interval say"
    if START in given:
        return f"{said} (set the spacing with --interval)"
    if INTERVAL in given:
        return f"{said} (set when the log began with --start)"
    return f"{said} (set them with --start and --interval)"
