"""Feeds that play a recording as if it were live: the demo, and replay of a recorded run."""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from gputop.errors import RecordingError
from gputop.model import DeviceSample, Missing, ProcessSample, Snapshot
from gputop.recording import RecordingReader, from_record
from gputop.sources.poller import ticks

DEMO_FILE = "demo-8xh100.jsonl.gz"


def demo_path() -> Path:
    """The recording shipped inside the package: an 8-GPU training node."""
    return Path(str(resources.files("gputop") / "data" / DEMO_FILE))


def demo_feed(interval: float | None = None, devices: set[int] | None = None) -> RecordingFeed:
    """The demo: the bundled recording, looping, re-timed to now, a tick every `interval`
    seconds, only the GPUs in `devices` (all without)."""
    return RecordingFeed.from_file(demo_path(), interval=interval, devices=devices)


class RecordingFeed:
    """Plays Snapshots at `interval`, re-timed to the wall clock (so data age reads as live) and,
    with `loop`, starting over at the end.

    Re-timed, a tick's time is when it is shown: played faster than recorded (`interval` shorter
    than the recording's own), the recording's seconds pass faster, never the clock. Every time
    a tick carries moves with it (the probe's readings, Xids, when a GPU was lost); processes
    keep the age they had when recorded. `devices` keeps only those GPU indexes, as the poller
    does; `on_loop` is called when the recording starts over."""

    def __init__(self, snapshots: Sequence[Snapshot | dict[str, Any]], *, loop: bool = True,
                 retime: bool = True, clock: Callable[[], float] = time.time,
                 warning: str | None = None, interval: float | None = None,
                 devices: set[int] | None = None,
                 on_loop: Callable[[], None] | None = None) -> None:
        if not snapshots:
            raise RecordingError("the recording holds no snapshots")
        # Snapshots, or ticks in record form decoded when played (a day is 86,400 of them).
        self.snapshots = list(snapshots)
        self.loop = loop
        self.retime = retime
        self.warning = warning
        self.interval = interval
        self.devices = devices
        self.on_loop = on_loop
        self.loops = 0  # times the recording started over
        self._clock = clock
        self._i = 0
        self._start: tuple[float, float] | None = None  # (wall time, recording time) of a loop
        self._spacing: float | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kw: object) -> RecordingFeed:
        reader = RecordingReader(path)
        states = list(reader.states())
        return cls(states, warning=reader.warning, **kw)  # type: ignore[arg-type]

    def skip(self, n: int) -> None:
        self._i = min(len(self.snapshots) - 1, self._i + n)

    def _advance(self) -> int | None:
        """The index of the next tick, moving past it (starting over at the end, with `loop`);
        None at the end."""
        if self._i >= len(self.snapshots):
            if not self.loop:
                return None
            self._i = 0
            self._start = None
            self.loops += 1
            if self.on_loop is not None:
                self.on_loop()
        self._i += 1
        return self._i - 1

    def next(self) -> Snapshot | None:
        i = self._advance()
        if i is None:
            return None
        snap = self._snapshot(i)
        if self.devices is not None:
            snap = only_devices(snap, self.devices)
        if self.retime:
            snap = self._shift(snap)
        return snap

    def _snapshot(self, i: int) -> Snapshot:
        snap = self.snapshots[i]
        if isinstance(snap, dict):
            snap = self.snapshots[i] = from_record(snap)
        return snap

    def spacing(self) -> float:
        """The recording's own seconds between ticks (its median)."""
        if self._spacing is None:
            n = min(len(self.snapshots), 61)
            times = [self._snapshot(i).time for i in range(n)]
            gaps = sorted(b - a for a, b in itertools.pairwise(times) if b > a)
            self._spacing = gaps[len(gaps) // 2] if gaps else 1.0
        return self._spacing

    def _shift(self, snap: Snapshot) -> Snapshot:
        """Moves the recording to now, at the pace it is played, keeping the processes' ages."""
        if self._start is None:
            self._start = (self._clock(), snap.time)
        wall0, rec0 = self._start
        scale = 1.0 if self.interval is None else self.interval / self.spacing()

        def at(t: float) -> float:
            return wall0 + (t - rec0) * scale

        new_time = at(snap.time)
        age_shift = new_time - snap.time  # a process's age at this tick stays as recorded
        procs = tuple(_shift_process(p, age_shift, at) for p in snap.processes)
        devices = tuple(_shift_device(d, at) for d in snap.devices)
        return dataclasses.replace(snap, time=new_time, processes=procs, devices=devices)

    def poll_once(self) -> Snapshot:
        snap = self.next()
        if snap is None:
            raise RecordingError("the recording has ended")
        return snap

    async def stream(self, interval: float) -> AsyncIterator[Snapshot]:
        """One tick every `interval` seconds, on a clock. Re-timed, deadlines missed while the
        consumer was busy skip their ticks, as a live poll would miss them, so the data never
        falls behind the clock."""
        if interval > 0:
            self.interval = interval
        first: float | None = None
        played = 0
        async for deadline in ticks(interval):
            if first is None:
                first = deadline
            due = round((deadline - first) / interval) if interval > 0 and self.retime else played
            while played < due:
                if self._advance() is None:
                    return
                played += 1
            snap = self.next()
            if snap is None:
                return
            played += 1
            yield snap

    def close(self) -> None:
        pass


def _shift_process(p: ProcessSample, age_shift: float,
                   at: Callable[[float], float]) -> ProcessSample:
    if isinstance(p.create_time, Missing) and p.probe is None:
        return p
    created = p.create_time if isinstance(p.create_time, Missing) else p.create_time + age_shift
    probe = None if p.probe is None else dataclasses.replace(p.probe, ts=at(p.probe.ts))
    return dataclasses.replace(p, create_time=created, probe=probe)


def _shift_device(d: DeviceSample, at: Callable[[float], float]) -> DeviceSample:
    if d.lost is None and not d.xids:
        return d
    lost = d.lost
    if lost is not None and lost.since is not None:
        lost = dataclasses.replace(lost, since=at(lost.since))
    xids = tuple(dataclasses.replace(x, time=at(x.time)) for x in d.xids)
    return dataclasses.replace(d, lost=lost, xids=xids)


def only_devices(snap: Snapshot, devices: set[int]) -> Snapshot:
    """The Snapshot as a poller with `--devices` would have taken it: only those GPUs, their
    processes and their links."""
    return dataclasses.replace(
        snap,
        devices=tuple(d for d in snap.devices if d.index in devices),
        processes=tuple(p for p in snap.processes if p.device_index in devices),
        links=tuple(lk for lk in snap.links if lk.device_index in devices))
