"""The Findings of a recording at any tick, for `gputop replay`.

Findings at a tick depend on the whole run before it: a finding opens after its condition has
held for a while, keeps the worst moment since it began, and closes only after the condition has
been false for a while. So the engine is run from the start of the recording, once, in a thread
of its own; every CHECKPOINT_EVERY ticks a copy of its state is kept (without its window of
Snapshots, which is read back from the recording when needed), so going back, or forward again,
costs at most the window plus CHECKPOINT_EVERY ticks."""

from __future__ import annotations

import bisect
import copy
import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from gputop.diagnose.engine import Engine
from gputop.diagnose.types import Finding
from gputop.diagnose.window import History
from gputop.model import Snapshot
from gputop.recording.index import RecordingIndex, TickReader
from gputop.recording.series_index import SeriesIndex, SeriesTickReader

Index = RecordingIndex | SeriesIndex  # one file, or a recording's files as one run
Reader = TickReader | SeriesTickReader
CHECKPOINT_EVERY = 60  # ticks between copies of the engine's state
FINDINGS_KEPT = 4096  # ticks whose open Findings are remembered: stepping back costs nothing


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
                 publish: Callable[[int, list[Finding]], object],
                 failed: Callable[[Exception], object], *, lag_s: float = 0.5) -> None:
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

    def _tell(self, fn: Callable[..., object], *args: Any) -> None:
        try:
            fn(*args)
        except RuntimeError:  # the event loop has closed: the replay is over
            self._stop = True
