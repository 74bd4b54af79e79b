"""Bounded per-GPU history, fed once per Snapshot and read by every graph that shows it."""

from __future__ import annotations

from collections import deque

from gputop.model import DeviceSample, Missing

HISTORY_LENGTH = 600  # ticks: ten minutes at 1 s, more than the widest terminal shows


class GpuHistory:
    """Utilization (%), memory used (bytes) and power draw (W) of one GPU, newest last.

    A tick without a value (lost GPU, unsupported field) is stored as None so the graph shows a
    gap instead of joining across it."""

    def __init__(self, maxlen: int = HISTORY_LENGTH) -> None:
        self.util: deque[float | None] = deque(maxlen=maxlen)
        self.mem: deque[float | None] = deque(maxlen=maxlen)
        self.power: deque[float | None] = deque(maxlen=maxlen)
        self.ticks = 0  # values pushed so far: lets a graph shift by one instead of redrawing

    def push(self, d: DeviceSample) -> None:
        self.ticks += 1
        self.util.append(_num(d.util_gpu, d))
        self.mem.append(_num(d.mem_used, d))
        self.power.append(_num(d.power_draw, d))

    def prepend(self, older: list[DeviceSample]) -> None:
        """Takes values from before the oldest one held (oldest first), as many as fit."""
        room = (self.util.maxlen or len(older)) - len(self.util)
        for d in reversed(older[-room:] if room > 0 else []):
            self.util.appendleft(_num(d.util_gpu, d))
            self.mem.appendleft(_num(d.mem_used, d))
            self.power.appendleft(_num(d.power_draw, d))
        self.ticks += 2  # see drop

    def drop(self, n: int | None = None) -> None:
        """Forgets the newest `n` values (all with None): a replay went back in time."""
        for values in (self.util, self.mem, self.power):
            if n is None or n >= len(values):
                values.clear()
            else:
                for _ in range(n):
                    values.pop()
        self.ticks += 2  # not one more than a graph last drew, so it redraws instead of shifting


def _num(v: object, d: DeviceSample) -> float | None:
    if d.lost is not None or isinstance(v, Missing) or v is None:
        return None
    return float(v)  # type: ignore[arg-type]
