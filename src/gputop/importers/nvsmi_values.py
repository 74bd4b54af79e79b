"""How nvidia-smi prints a value, shared by its importers (`-q -x`, `--query-gpu` CSV, dmon, pmon).

nvidia-smi prints a placeholder where NVML gave no value. Each becomes the `Missing` that says why:
"N/A", "Not Supported", "Requested functionality has been deprecated" (with or without brackets)
-> "unsupported"; "[Insufficient Permissions]" -> "no_permission"; "[GPU is lost]" -> "gpu_lost";
any other bracketed text ("[Unknown Error]") -> "error". A field the output does not carry at all
is "unsupported" with the detail `NOT_IN_FILE`, so the two cases stay apart.
"""

from __future__ import annotations

import functools
import re

from gputop.model import Missing

NOT_IN_FILE = "not in nvidia-smi output"
ABSENT = Missing("unsupported", detail=NOT_IN_FILE)

Reading = str | Missing

UNSUPPORTED_TEXTS = {
    "n/a",
    "not supported",
    "requested functionality has been deprecated",
    "not available",
    "not available in wddm driver model",  # -q prints it where -q -x prints N/A
}

# Clock-event reason names as nvidia-smi spells them (the suffix after `clocks_event_reason_`,
# `clocks_throttle_reasons.`, ...) -> model.THROTTLE name.
REASONS = {
    "gpu_idle": "gpu_idle",
    "applications_clocks_setting": "app_clocks",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "display_clocks_setting": "display_clocks",
}

# Process type column: C compute, G graphics, M an MPS compute client.
PROCESS_KINDS = {
    "C": "compute",
    "G": "graphics",
    "C+G": "compute+graphics",
    "M": "compute",
    "M+C": "compute",
}


@functools.lru_cache(maxsize=4096)  # logs repeat the same few texts ("[N/A]", "Not Active")
def classify(text: str) -> Reading:
    """One printed value, or the Missing that nvidia-smi's placeholder stands for."""
    text = text.strip()
    if not text:
        return Missing("unsupported", detail="empty in nvidia-smi output")
    bracketed = text.startswith("[") and text.endswith("]")
    bare = text[1:-1].strip() if bracketed else text
    lowered = bare.lower()
    if lowered in UNSUPPORTED_TEXTS:
        return Missing("unsupported") if lowered == "n/a" else Missing("unsupported", detail=bare)
    if lowered == "insufficient permissions":
        return Missing("no_permission")
    if lowered == "gpu is lost":
        return Missing("gpu_lost")
    # Any other bracketed text is an NVML error string ("[Unknown Error]", "[GPU requires reset]").
    if bracketed or lowered == "unknown error":
        return Missing("error", detail=bare)
    return text


def unreadable(text: str) -> Missing:
    return Missing("error", detail=f"cannot read {text!r}")


def text_or_blank(r: Reading) -> str:
    """A name, UUID or bus id: the text, or "" where the file has none."""
    return r if isinstance(r, str) else ""


def pstate(r: Reading) -> int | Missing:
    """"P0" -> 0."""
    if isinstance(r, Missing):
        return r
    m = re.fullmatch(r"P(\d+)", r)
    return int(m.group(1)) if m else unreadable(r)
