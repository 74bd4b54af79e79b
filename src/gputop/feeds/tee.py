"""A feed that records what another feed yields: `gputop --record` with the dashboard."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from gputop.errors import RecordingError
from gputop.feeds import PolledFeed
from gputop.model import Snapshot
from gputop.recording.writer import RecordingWriter


class RecordingTee:
    """A feed that also writes what it yields. A write failure (a full disk) is reported in the
    snapshot's warnings and recording stops; monitoring goes on and the file keeps every tick
    written before."""

    def __init__(self, feed: PolledFeed, writer: RecordingWriter) -> None:
        self.feed = feed
        self.writer = writer
        self.error: str | None = None
        self.failed: RecordingError | None = None  # why recording stopped

    def _tee(self, snap: Snapshot) -> Snapshot:
        if self.error is None:
            try:
                self.writer.write(snap)
            except RecordingError as e:
                self.failed = e
                self.error = f"recording stopped: {e}"
        if self.error is not None:
            snap = dataclasses.replace(snap, warnings=(*snap.warnings, self.error))
        return snap

    def poll_once(self) -> Snapshot:
        return self._tee(self.feed.poll_once())

    async def stream(self, interval: float) -> AsyncIterator[Snapshot]:
        async for snap in self.feed.stream(interval):
            yield self._tee(snap)

    def close(self) -> None:
        self.feed.close()
