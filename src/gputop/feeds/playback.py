"""Feeds that play a recording as if it were live: the demo, and replay of a recorded run."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from gputop.errors import RecordingError
from gputop.model import Missing, Snapshot
from gputop.recording import RecordingReader, from_record

DEMO_FILE = "demo-8xh100.jsonl.gz"


def demo_path() -> Path:
    """The recording shipped inside the package: an 8-GPU training node."""
    return Path(str(resources.files("gputop") / "data" / DEMO_FILE))


def demo_feed() -> RecordingFeed:
    """The demo: the bundled recording, looping, re-timed to now."""
    return RecordingFeed.from_file(demo_path())


class RecordingFeed:
    """Plays Snapshots at `interval`, re-timed to the wall clock (so data age reads as live) and,
    with `loop`, starting over at the end."""

    def __init__(self, snapshots: Sequence[Snapshot | dict[str, Any]], *, loop: bool = True,
                 retime: bool = True, clock: Callable[[], float] = time.time,
                 warning: str | None = None) -> None:
        if not snapshots:
            raise RecordingError("the recording holds no snapshots")
        # Snapshots, or ticks in record form decoded when played (a day is 86,400 of them).
        self.snapshots = list(snapshots)
        self.loop = loop
        self.retime = retime
        self.warning = warning
        self._clock = clock
        self._i = 0
        self._offset: float | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kw: object) -> RecordingFeed:
        reader = RecordingReader(path)
        states = list(reader.states())
        return cls(states, warning=reader.warning, **kw)  # type: ignore[arg-type]

    def skip(self, n: int) -> None:
        self._i = min(len(self.snapshots) - 1, self._i + n)

    def next(self) -> Snapshot | None:
        if self._i >= len(self.snapshots):
            if not self.loop:
                return None
            self._i = 0
            self._offset = None
        snap = self.snapshots[self._i]
        if isinstance(snap, dict):
            snap = self.snapshots[self._i] = from_record(snap)
        self._i += 1
        if self.retime:
            snap = self._shift(snap)
        return snap

    def _shift(self, snap: Snapshot) -> Snapshot:
        """Moves the recording to now, keeping its own pace and the processes' ages."""
        if self._offset is None:
            self._offset = self._clock() - snap.time
        off = self._offset
        procs = tuple(
            p if isinstance(p.create_time, Missing)
            else dataclasses.replace(p, create_time=p.create_time + off)
            for p in snap.processes)
        return dataclasses.replace(snap, time=snap.time + off, processes=procs)

    def poll_once(self) -> Snapshot:
        snap = self.next()
        if snap is None:
            raise RecordingError("the recording has ended")
        return snap

    async def stream(self, interval: float) -> AsyncIterator[Snapshot]:
        while (snap := self.next()) is not None:
            yield snap
            await asyncio.sleep(interval)

    def close(self) -> None:
        pass
