"""`gputop replay`: where in the recording the dashboard is, how fast it moves (ReplayControl),
and the feed the dashboard consumes (ReplayFeed), which carries the Findings the diagnostics had
at that moment (replay.timeline). Nothing here knows about Textual; the dashboard's keys call
`ReplayControl`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from gputop.diagnose.engine import Engine
from gputop.diagnose.types import Finding
from gputop.model import DeviceSample, Snapshot
from gputop.recording.index import TickDamaged
from gputop.replay.seek import stamp
from gputop.replay.timeline import FindingsTimeline, FindingsWorker, Index, Reader

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
HISTORY_TICKS = 600  # ticks read back into the graphs after a jump (ui.history.HISTORY_LENGTH)
QUICK_TICKS = 60  # of those, read before the jump is shown; the older ones follow
MIN_FRAME_S = 0.1  # at high speed, several ticks a frame rather than more frames
FOLLOW_POLL_S = 0.5  # how often --follow looks for new ticks (at most)
LAG_TICKS = 10  # findings this far behind the shown tick are said to be catching up
PAUSED = "⏸"


# ----------------------------------------------------------------------------------------------
# Position, speed, pause


class ReplayControl:
    """Where the replay is (`position`, a tick from 0), whether it moves, and how fast.

    `times` is the recording's tick times; with `follow` it grows while the replay runs."""

    def __init__(self, times: Sequence[float], *, follow: bool = False, paused: bool = False,
                 interval_s: float = 1.0) -> None:
        self.times = times
        self.follow = follow
        self.paused = paused
        self.speed = 1.0
        self.interval_s = interval_s  # the recording's own interval: when following goes quiet
        self.position = max(0, len(times) - 1) if follow else 0
        self._carry = 0.0  # part of a tick played but not yet shown

    @property
    def ticks(self) -> int:
        return len(self.times)

    @property
    def last(self) -> int:
        return max(0, self.ticks - 1)

    @property
    def at_end(self) -> bool:
        return self.position >= self.last

    def seek(self, tick: int) -> None:
        self.position = min(max(0, tick), self.last)
        self._carry = 0.0

    def to_start(self) -> None:
        self.seek(0)

    def to_end(self) -> None:
        """The last tick; following a recording, the newest one, and on with the new ones."""
        self.seek(self.last)
        if self.follow:
            self.paused = False

    def toggle_pause(self) -> None:
        if self.paused and self.at_end and not self.follow:
            self.seek(0)  # play again from the start
        self.paused = not self.paused
        self._carry = 0.0

    def step(self, n: int) -> None:
        """Moves `n` ticks (back when negative) and pauses there."""
        self.paused = True
        self.seek(self.position + n)

    def faster(self) -> None:
        self.speed = SPEEDS[min(len(SPEEDS) - 1, SPEEDS.index(self.speed) + 1)]

    def slower(self) -> None:
        self.speed = SPEEDS[max(0, SPEEDS.index(self.speed) - 1)]

    def play(self, elapsed_s: float, interval_s: float) -> None:
        """`elapsed_s` of real time has passed; at 1x a tick lasts `interval_s`."""
        if self.paused or self.ticks == 0:
            return
        self._carry += elapsed_s * self.speed / interval_s
        n = int(self._carry)
        self._carry -= n
        self.position = min(self.last, self.position + n)
        if self.at_end and not self.follow:
            self.paused = True
            self._carry = 0.0

    def until_next(self, interval_s: float) -> float | None:
        """Seconds of real time until the next tick is due; None when nothing will move."""
        if self.paused or self.at_end:
            return None
        return max(0.0, (1.0 - self._carry) * interval_s / self.speed)

    def grew(self, old_ticks: int) -> None:
        """New ticks were appended: playing at the end (following), show the newest at once."""
        if not self.paused and self.position >= old_ticks - 1:
            self.position = self.last
            self._carry = 0.0

    def span_text(self) -> str:
        """What the recording covers and where the replay is, for the seek box."""
        if self.ticks == 0:
            return "no ticks yet"
        t = self.times
        return (f"{stamp(t[0], t)} to {stamp(t[-1], t)}, {self.ticks} ticks; now "
                f"{stamp(t[self.position], t)} (tick {self.position + 1})")

    def state_word(self, now: float | None = None) -> str:
        if self.ticks == 0:
            return "○ waiting for the first tick"
        if self.follow and self.at_end and not self.paused:
            quiet = None if now is None else now - self.times[-1]
            if quiet is not None and quiet > max(3.0, 3 * self.interval_s):
                return f"▲ no new tick for {_age(quiet)}"
            return "● following"
        if self.at_end and not self.follow:
            return "■ end"
        return f"{PAUSED} paused" if self.paused else "▶"

    def status(self, now: float | None = None) -> str:
        """The header's words: "replay 10:04:20 (tick 260/600) 4x ⏸ paused"."""
        if self.ticks == 0:
            return f"replay  {self.state_word(now)}"
        speed = f"{self.speed:g}x"
        return (f"replay {stamp(self.times[self.position], self.times)} "
                f"(tick {self.position + 1}/{self.ticks}) {speed} {self.state_word(now)}")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


# ----------------------------------------------------------------------------------------------
# The feed


@dataclasses.dataclass(frozen=True)
class HistoryEdit:
    """How the graphs' history changes: forget all of it (`clear`) or its newest `drop` ticks,
    then take `push` (the GPUs of each tick in between, oldest first) before the next Snapshot;
    or, after a jump, `prepend` the ticks before the oldest one it holds."""

    clear: bool = False
    drop: int = 0
    push: tuple[tuple[DeviceSample, ...], ...] = ()
    prepend: tuple[tuple[DeviceSample, ...], ...] = ()


class ReplayView(Protocol):
    """What the feed tells the dashboard, besides the Snapshots it yields."""

    def set_findings(self, findings: list[Finding]) -> None: ...
    def edit_history(self, edit: HistoryEdit) -> None: ...
    def add_warning(self, text: str) -> None: ...


class ReplayFeed:
    """The dashboard's feed for `gputop replay`: yields the Snapshot at the control's position
    whenever it changes, paced by the speed; the keys change `control` and call `wake`."""

    def __init__(self, index: Index, *, follow: bool = False, paused: bool = False,
                 engine: Engine | None = None, history_ticks: int = HISTORY_TICKS) -> None:
        meta = (index.header or {}).get("meta") or {}
        recorded = meta.get("interval") if isinstance(meta, dict) else None
        self.index = index
        self.control = ReplayControl(
            index.times, follow=follow, paused=paused,
            interval_s=float(recorded) if isinstance(recorded, (int, float)) else 1.0)
        self.timeline = FindingsTimeline(index, engine)
        self.view: ReplayView | None = None
        self.history_ticks = history_ticks
        self.shown: int | None = None  # the tick on screen
        self.findings_tick: int | None = None  # the tick the Findings on screen are for
        self.warning = index.warning
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._worker: FindingsWorker | None = None

    def wake(self) -> None:
        """Something changed (a key): look at the control again now."""
        self._wake.set()

    def status(self, now: float | None = None) -> str:
        """The control's status, and how far the diagnostics are when they lag behind."""
        text = self.control.status(now)
        shown = self.shown
        if shown is not None and (self.findings_tick is None
                                  or abs(shown - self.findings_tick) > LAG_TICKS):
            done = min(99, int(100 * (self.timeline.position + 1) / (shown + 1)))
            text += f"  diagnosing {done}%" if self.timeline.position < shown else \
                "  diagnosing"
        return text

    async def settled(self) -> None:
        """Waits until the Findings shown are those of the tick shown."""
        while self.shown is None or self.findings_tick != self.shown:
            self._settled.clear()
            await self._settled.wait()

    async def stream(self, interval: float) -> AsyncIterator[Snapshot]:
        loop = asyncio.get_running_loop()
        self._worker = FindingsWorker(
            self.timeline,
            lambda tick, found: loop.call_soon_threadsafe(self._found, tick, found),
            lambda e: loop.call_soon_threadsafe(self._failed, e))
        reader = self.index.reader()
        control = self.control
        last = loop.time()
        next_poll = last + FOLLOW_POLL_S
        older: tuple[int, int] | None = None  # history still to read back after a jump
        try:
            while True:
                self._wake.clear()
                now = loop.time()
                if control.follow and not self.index.finished and now >= next_poll:
                    before = self.index.ticks
                    if await asyncio.to_thread(self.index.refresh):
                        control.grew(before)
                    if self.index.warning != self.warning:  # e.g. a next file of another run
                        old, self.warning = self.warning, self.index.warning
                        if self.view is not None and self.warning:
                            self.view.add_warning(self.warning.removeprefix(f"{old}; ")
                                                  if old else self.warning)
                    if self.index.finished:  # the writer closed the file: nothing will come
                        control.follow = False
                    next_poll = loop.time() + min(FOLLOW_POLL_S, interval)
                now = loop.time()
                control.play(now - last, interval)
                last = now
                if control.ticks and control.position != self.shown:
                    tick = control.position
                    try:
                        snap, edit, older = await asyncio.to_thread(self._frame, reader,
                                                                    self.shown, tick)
                    except TickDamaged as e:
                        self._damaged(e)
                        continue
                    if self.view is not None and edit is not None:
                        self.view.edit_history(edit)
                    self.shown = tick
                    self._worker.want(tick)
                    yield snap
                    continue
                if older is not None:  # read a piece at a time: a key in between stops it
                    oldest, stop = older
                    older = None
                    ticks: list[tuple[DeviceSample, ...]] = []
                    for start in range(oldest, stop, QUICK_TICKS):
                        end = min(stop, start + QUICK_TICKS)
                        ticks += await asyncio.to_thread(_devices, reader, start, end)
                        if control.position != self.shown:
                            break
                    else:
                        if self.view is not None:
                            self.view.edit_history(HistoryEdit(prepend=tuple(ticks)))
                    continue
                wait = control.until_next(interval)
                if wait is not None:
                    wait = max(MIN_FRAME_S, wait)
                if control.follow and not self.index.finished:
                    poll = max(0.0, next_poll - loop.time())
                    wait = poll if wait is None else min(wait, poll)
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._worker.close()
            reader.close()

    def _frame(self, reader: Reader, shown: int | None, tick: int
               ) -> tuple[Snapshot, HistoryEdit | None, tuple[int, int] | None]:
        """The Snapshot at `tick`, how the history must change to lead up to it from `shown`,
        and which older ticks to read back into it next (run in a thread: it reads the file)."""
        snap = reader.snapshot(tick)
        if shown is not None and shown < tick <= shown + QUICK_TICKS:
            if tick == shown + 1:
                return snap, None, None
            return snap, HistoryEdit(push=_devices(reader, shown + 1, tick)), None
        if shown is not None and tick < shown < tick + self.history_ticks:
            return snap, HistoryEdit(drop=shown - tick + 1), None
        start = max(0, tick - min(QUICK_TICKS, self.history_ticks))
        edit = HistoryEdit(clear=True, push=_devices(reader, start, tick))
        oldest = max(0, tick - self.history_ticks)
        return snap, edit, (oldest, start) if oldest < start else None

    def _damaged(self, e: TickDamaged) -> None:
        """A tick turned out damaged as it was read: the replay ends before it, and says so."""
        if e.tick == 0:
            raise e
        self.index.cut(e.tick, e.message)
        self.control.follow = False
        self.control.seek(self.control.position)
        self.warning = self.index.warning
        if self.view is not None:
            self.view.add_warning(f"{e.message}; the replay ends before it")

    def _found(self, tick: int, findings: list[Finding]) -> None:
        self.findings_tick = tick
        if self.view is not None:
            self.view.set_findings(findings)
        if tick == self.shown:
            self._settled.set()

    def _failed(self, e: Exception) -> None:
        if self.view is not None:
            self.view.add_warning(f"diagnostics stopped: {e}")

    def close(self) -> None:
        """Stops the diagnostics; the index stays open (its opener closes it)."""
        if self._worker is not None:
            self._worker.close()
        self.timeline.close()


def _devices(reader: Reader, start: int, stop: int) -> tuple[tuple[DeviceSample, ...], ...]:
    return tuple(reader.devices(k) for k in range(start, stop))
