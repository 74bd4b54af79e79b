"""`gputop replay`: where in the recording the dashboard is, how fast it moves, and the Findings
the diagnostics engine had at that moment. Nothing here knows about Textual; the dashboard's
keys call `ReplayControl`, and `ReplayFeed` is the feed the dashboard consumes.

Findings at a tick depend on the whole run before it: a finding opens after its condition has
held for a while, keeps the worst moment since it began, and closes only after the condition has
been false for a while. So the engine is run from the start of the recording, once, in a thread
of its own; every CHECKPOINT_EVERY ticks a copy of its state is kept (without its window of
Snapshots, which is read back from the recording when needed), so going back, or forward again,
costs at most the window plus CHECKPOINT_EVERY ticks.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import dataclasses
import datetime
import re
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from gputop.diagnose.engine import Engine, Finding
from gputop.diagnose.window import History
from gputop.model import DeviceSample, Snapshot
from gputop.recording_index import RecordingIndex, TickDamaged, TickReader
from gputop.series_index import SeriesIndex, SeriesTickReader

Index = RecordingIndex | SeriesIndex  # one file, or a recording's files as one run
Reader = TickReader | SeriesTickReader

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
CHECKPOINT_EVERY = 60  # ticks between copies of the engine's state
FINDINGS_KEPT = 4096  # ticks whose open Findings are remembered: stepping back costs nothing
HISTORY_TICKS = 600  # ticks read back into the graphs after a jump (ui.history.HISTORY_LENGTH)
QUICK_TICKS = 60  # of those, read before the jump is shown; the older ones follow
MIN_FRAME_S = 0.1  # at high speed, several ticks a frame rather than more frames
FOLLOW_POLL_S = 0.5  # how often --follow looks for new ticks (at most)
LAG_TICKS = 10  # findings this far behind the shown tick are said to be catching up
PAUSED = "⏸"


class SeekError(ValueError):
    """What the user typed is not a place in the recording; the message says why."""


# ----------------------------------------------------------------------------------------------
# Where to go: "10:04:20", "-5m", "+90s", "260", "start", "end"

_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d*)?))?")
_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(min|sec|ms|s|m|h|d)?")
_SECONDS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
            "d": 86400.0, None: 1.0}
SEEK_HELP = "a time (10:04:20), an offset (-5m, +90s, +1h30m) or a tick number (260)"


def parse_duration(text: str) -> float:
    """Seconds in "90", "90s", "5m", "1h30m", "1:30" (m:s) or "1:02:03" (h:m:s)."""
    s = text.strip().lower()
    m = _CLOCK.fullmatch(s)
    if m:
        a, b, c = int(m.group(1)), int(m.group(2)), m.group(3)
        return a * 3600 + b * 60 + float(c) if c is not None else a * 60 + b
    total, pos, found = 0.0, 0, False
    for part in _UNIT.finditer(s):
        if s[pos:part.start()].strip() or (found and part.group(2) is None):
            break
        total += float(part.group(1)) * _SECONDS[part.group(2)]
        pos, found = part.end(), True
    if not found or s[pos:].strip():
        raise SeekError(f"not a duration: {text.strip()!r} (e.g. 90s, 5m, 1h30m)")
    return total


def nearest_tick(times: Sequence[float], t: float) -> int:
    """The tick taken nearest to `t` (the earlier of two as near)."""
    i = bisect.bisect_left(times, t)
    if i == 0:
        return 0
    if i >= len(times):
        return len(times) - 1
    return i - 1 if t - times[i - 1] <= times[i] - t else i


def parse_seek(text: str, times: Sequence[float], position: int) -> int:
    """The tick (from 0) that `text` names, seen from tick `position`; SeekError says why not."""
    s = text.strip().lower()
    n = len(times)
    if n == 0:
        raise SeekError("the recording has no ticks yet")
    if not s:
        raise SeekError(f"type {SEEK_HELP}")
    if s in ("start", "begin", "beginning", "first"):
        return 0
    if s in ("end", "last"):
        return n - 1
    if s[0] in "+-":
        offset = parse_duration(s[1:]) * (-1 if s[0] == "-" else 1)
        return nearest_tick(times, times[position] + offset)
    number = s.removeprefix("tick").removeprefix("#").strip()
    if number.isdigit():
        tick = int(number)
        if not 1 <= tick <= n:
            raise SeekError(f"tick {tick} is not in the recording (1 to {n})")
        return tick - 1
    t = _when(s, times, times[position])
    if t is None:
        raise SeekError(f"{text.strip()!r} is not {SEEK_HELP}")
    first, last = times[0], times[-1]
    if not first - 1.0 <= t <= last + 1.0:
        raise SeekError(f"{text.strip()} is not in the recording ({_stamp(first, times)} to "
                        f"{_stamp(last, times)})")
    return nearest_tick(times, t)


def _when(s: str, times: Sequence[float], now: float) -> float | None:
    """The epoch time a date and time ("2026-12-01 10:04:20") or a clock time ("10:04:20")
    names, in local time; a clock time on the day of the recording that puts it nearest `now`."""
    m = _CLOCK.fullmatch(s)
    if m is None:
        try:
            return datetime.datetime.fromisoformat(s.upper()).timestamp()
        except ValueError:
            return None
    hh, mm, ss = int(m.group(1)), int(m.group(2)), float(m.group(3) or 0)
    if hh > 23 or mm > 59 or ss >= 60:
        return None
    day = datetime.date.fromtimestamp(times[0])
    last_day = datetime.date.fromtimestamp(times[-1])
    candidates = []
    while day <= last_day:
        whole = datetime.datetime(day.year, day.month, day.day, hh, mm, int(ss))
        candidates.append(whole.timestamp() + ss % 1)
        day += datetime.timedelta(days=1)
    inside = [c for c in candidates if times[0] - 1.0 <= c <= times[-1] + 1.0]
    return min(inside or candidates, key=lambda c: abs(c - now))


def _stamp(t: float, times: Sequence[float]) -> str:
    """Local time of day; with the date when the recording spans more than one day."""
    days = {time.localtime(times[0])[:3], time.localtime(times[-1])[:3]} if times else set()
    return time.strftime("%Y-%m-%d %H:%M:%S" if len(days) > 1 else "%H:%M:%S",
                         time.localtime(t))


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
        return (f"{_stamp(t[0], t)} to {_stamp(t[-1], t)}, {self.ticks} ticks; now "
                f"{_stamp(t[self.position], t)} (tick {self.position + 1})")

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
        return (f"replay {_stamp(self.times[self.position], self.times)} "
                f"(tick {self.position + 1}/{self.ticks}) {speed} {self.state_word(now)}")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


# ----------------------------------------------------------------------------------------------
# The engine at any tick


@dataclasses.dataclass(frozen=True)
class _Saved:
    engine: Engine  # its state after the tick, with an empty window
    window_from: int  # the first tick of its window, read back on restore


class FindingsTimeline:
    """The diagnostics engine positioned at any tick of a recording: `at(tick)` returns the
    Findings open once the engine has seen ticks 0..tick, the same as a straight run would.

    Not thread-safe: one thread (FindingsWorker's) drives it."""

    def __init__(self, index: Index, engine: Engine | None = None, *,
                 every: int = CHECKPOINT_EVERY, remember: int = FINDINGS_KEPT) -> None:
        if engine is None:
            from gputop.diagnose import default_engine

            engine = default_engine()
        self.index = index
        self.engine = engine
        self.position = -1  # the last tick the engine has seen
        self.restores = 0  # how often a saved state was used (for the bench and tests)
        self._reader: Reader = index.reader()
        self._every = every
        self._shared = {id(d): d for d in engine.diagnostics}
        fresh = copy.deepcopy(engine, dict(self._shared))
        self._saved: dict[int, _Saved] = {-1: _Saved(fresh, 0)}
        self._saved_ticks = [-1]
        self._seen: OrderedDict[int, list[Finding]] = OrderedDict()
        self._remember = max(1, remember)

    def at(self, tick: int) -> list[Finding]:
        found = self.seen(tick)
        while found is None:
            self.step_toward(tick)
            found = self.seen(tick)
        return found

    def seen(self, tick: int) -> list[Finding] | None:
        """The Findings open at `tick` if the engine has been there lately, else None."""
        found = self._seen.get(tick)
        if found is not None:
            self._seen.move_to_end(tick)
        return found

    def findings(self) -> list[Finding]:
        return self.engine.open_findings()

    @property
    def saved(self) -> int:
        """How many states of the engine are kept to start again from (0: it cannot be copied
        without its window, and every jump back runs it from the start)."""
        return len(self._saved) - 1

    def step_toward(self, target: int) -> None:
        """One piece of work towards `target`: one tick forward, or back to a saved state."""
        if not -1 <= target < self.index.ticks:
            raise IndexError(f"tick {target} is not in the recording")
        if self.position == target:
            self._remember_findings(target, self.engine.open_findings())
            return
        base = self._saved_ticks[bisect.bisect_right(self._saved_ticks, target) - 1]
        saved = self._saved[base]
        # Reading a window back costs about half of what running the engine over it does.
        restore_cost = (target - base) + (base - saved.window_from + 1) / 2
        if self.position > target or (target - self.position) > restore_cost:
            self._restore(base, saved)
            return
        tick = self.position + 1
        self._remember_findings(tick, self.engine.update(self._reader.snapshot(tick)))
        self.position = tick
        if tick % self._every == 0 and tick not in self._saved:
            self._save(tick)

    def close(self) -> None:
        self._reader.close()

    def _remember_findings(self, tick: int, found: list[Finding]) -> None:
        if tick >= 0:
            self._seen[tick] = found
            if len(self._seen) > self._remember:
                self._seen.popitem(last=False)

    def _save(self, tick: int) -> None:
        frozen = _freeze(self.engine, self._shared)
        if frozen is None:
            return
        start = tick + 1
        oldest = _oldest(self.engine)
        if oldest is not None:
            times = self.index.times
            while start > 0 and times[start - 1] >= oldest:
                start -= 1
        self._saved[tick] = _Saved(frozen, start)
        bisect.insort(self._saved_ticks, tick)

    def _restore(self, tick: int, saved: _Saved) -> None:
        if tick < 0:
            self.engine = copy.deepcopy(saved.engine, _memo(saved.engine, self._shared))
        else:
            snaps: list[Snapshot] = []
            for k in range(saved.window_from, tick + 1):
                snap = self._reader.snapshot(k)
                if not snaps or snap.time > snaps[-1].time:  # as Engine.update keeps them
                    snaps.append(snap)
            self.engine = _thaw(saved.engine, self._shared, snaps)
        self.position = tick
        self.restores += 1
        self._remember_findings(tick, self.engine.open_findings())


# The engine's state is its window of recent Snapshots (with what its rules have read out of
# them) and what it tracks about each condition. A copy keeps the second and drops the first: a
# window is ten minutes of Snapshots, and one per copy would keep the whole recording in memory;
# the window is read back from the recording on restore. The engine has no public way to do this,
# so these functions look for its window (a History) among its attributes; without one, no state
# is saved and the timeline runs from the start instead (always right, only slower).


def _history(engine: Engine) -> History | None:
    """The engine's window: the History among its attributes."""
    return next((v for v in vars(engine).values() if isinstance(v, History)), None)


def _oldest(engine: Engine) -> float | None:
    """The time of the oldest Snapshot the engine holds (None: none, or unknown)."""
    history = _history(engine)
    return history.snaps[0].time if history is not None and history.snaps else None


def _memo(engine: Engine, shared: dict[int, Any]) -> dict[int, Any]:
    """What a copy of the engine shares instead of copying: `shared` (the diagnostics: the
    engine keys its state by them) and the Findings in its lists (frozen; the closed ones add
    up over a long run)."""
    memo = dict(shared)
    for value in vars(engine).values():
        if isinstance(value, list):
            memo.update((id(f), f) for f in value if isinstance(f, Finding))
    return memo


def _freeze(engine: Engine, shared: dict[int, Any]) -> Engine | None:
    """A copy of the engine's state without its window."""
    history = _history(engine)
    if history is None:
        return None
    memo = _memo(engine, shared)
    memo[id(history)] = type(history)()
    return copy.deepcopy(engine, memo)


def _thaw(saved: Engine, shared: dict[int, Any], snaps: list[Snapshot]) -> Engine:
    engine = copy.deepcopy(saved, _memo(saved, shared))
    history = _history(engine)
    assert history is not None
    for snap in snaps:
        history.append(snap)
    return engine


class FindingsWorker:
    """Runs a FindingsTimeline in a thread towards the newest tick asked for, and publishes the
    Findings when it gets there (and every `lag_s` while it is catching up)."""

    def __init__(self, timeline: FindingsTimeline,
                 publish: Callable[[int, list[Finding]], None],
                 failed: Callable[[Exception], None], *, lag_s: float = 0.5) -> None:
        self.timeline = timeline
        self._publish = publish
        self._failed = failed
        self._lag_s = lag_s
        self._target: int | None = None
        self._published: int | None = None
        self._stop = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="gputop-findings", daemon=True)
        self._thread.start()

    def want(self, tick: int) -> None:
        with self._cond:
            self._target = tick
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            with self._cond:
                while not self._stop and (self._target is None
                                          or self._target == self._published):
                    self._cond.wait()
                if self._stop:
                    return
                target = self._target
            assert target is not None
            try:
                found = self.timeline.seen(target)
                if found is None:
                    self.timeline.step_toward(target)
                    found = self.timeline.seen(target)
            except Exception as e:  # a damaged tick: said once, and the worker stops
                if not self._stop:  # (closing mid-step closes the file under it: not news)
                    self._tell(self._failed, e)
                return
            now = time.monotonic()
            if found is not None:
                self._published = target
                self._tell(self._publish, target, found)
                last = now
            elif now - last >= self._lag_s and self.timeline.position >= 0:
                self._published = self.timeline.position
                self._tell(self._publish, self.timeline.position, self.timeline.findings())
                last = now

    def _tell(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except RuntimeError:  # the event loop has closed: the replay is over
            self._stop = True


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
