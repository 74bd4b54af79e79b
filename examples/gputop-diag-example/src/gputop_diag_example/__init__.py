"""Corrected ECC errors rising on a GPU: an example gputop diagnostic plug-in."""

from __future__ import annotations

from collections.abc import Sequence

from gputop.diagnose import Condition, Diagnostic
from gputop.model import Missing, Snapshot

WINDOW_S = 600.0  # ten minutes: corrected errors trickle in
WARNING_COUNT = 100  # more than this many in the window is a GPU to watch


def _count(s: Snapshot, index: int) -> int | None:
    d = s.device(index)
    if d is None or d.lost is not None or isinstance(d.ecc_corrected, Missing):
        return None
    return int(d.ecc_corrected)


def check(window: Sequence[Snapshot]) -> list[Condition]:
    out = []
    for d in window[-1].devices if window else ():
        counts = [c for s in window if (c := _count(s, d.index)) is not None]
        if len(counts) < 2:
            continue
        new = counts[-1] - counts[0]
        if new <= 0:  # no new errors, or the driver reloaded and reset the count
            continue
        out.append(Condition(
            id="ecc.corrected_rising", device=d.index,
            severity="warning" if new > WARNING_COUNT else "info",
            title=f"GPU{d.index}: {new} corrected ECC errors in the last "
                  f"{(window[-1].time - window[0].time) / 60:.0f} min",
            cause="The GPU's memory keeps correcting errors; a rising count often comes before "
                  "uncorrectable errors or row remaps.",
            fix="Watch the trend (nvidia-smi -q -d ECC,ROW_REMAPPER); plan to drain and reset "
                "the GPU, and open a hardware ticket if it keeps rising.",
            evidence={"new_corrected": new}))
    return out


ECC_CORRECTED_RISING = Diagnostic(name="ecc_corrected_rising", check=check, window_s=WINDOW_S)
