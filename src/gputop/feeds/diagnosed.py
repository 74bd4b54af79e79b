"""A feed that runs the diagnostics over what another feed yields."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from gputop.diagnose import Engine, Finding, default_engine
from gputop.feeds import PolledFeed
from gputop.model import Snapshot

DIAGNOSE_EVERY_S = 1.0


class DiagnosedFeed:
    """A feed that runs the diagnostics engine over its snapshots (in a worker thread: a few ms
    a tick) and hands the open Findings to `listener` (the dashboard's findings panel).

    The engine is given at most one snapshot a second: its rules read windows of a minute or
    more, and the window it keeps (ten minutes) then holds as many snapshots at --interval 0.2
    as at 1 s, so memory does not grow with the polling rate."""

    def __init__(self, feed: PolledFeed, engine: Engine, *,
                 new_engine: Callable[[], Engine] | None = None) -> None:
        self.feed = feed
        self.engine = engine
        self._new_engine = new_engine
        self.listener: Callable[[list[Finding]], None] | None = None
        self._last: float | None = None  # time of the last snapshot diagnosed

    def poll_once(self) -> Snapshot:
        snap = self.feed.poll_once()
        if self._due(snap):
            self._tell(self.engine.update(snap))
        return snap

    async def stream(self, interval: float) -> AsyncIterator[Snapshot]:
        import asyncio  # here: the dashboard loads asyncio its own way (ui/no_tls.py)

        first = True
        async for snap in self.feed.stream(interval):
            if first:  # the first frame does not wait for the diagnostics: they follow it
                first = False
                yield snap
                if self._due(snap):
                    self._tell(await asyncio.to_thread(self.engine.update, snap))
                continue
            if self._due(snap):
                self._tell(await asyncio.to_thread(self.engine.update, snap))
            yield snap

    def _due(self, snap: Snapshot) -> bool:
        if self._last is not None and snap.time - self._last < 0.9 * DIAGNOSE_EVERY_S:
            return False
        self._last = snap.time
        return True

    def reset(self) -> None:
        """Starts over with a fresh engine (the demo starts its recording over)."""
        if self._new_engine is not None:
            self.engine = self._new_engine()
            self._last = None

    def _tell(self, findings: list[Finding]) -> None:
        if self.listener is not None:
            self.listener(findings)

    def close(self) -> None:
        self.feed.close()


def with_diagnostics(feed: PolledFeed) -> DiagnosedFeed:
    """`feed` diagnosed by the built-in diagnostics and the installed plug-ins."""
    return DiagnosedFeed(feed, default_engine(), new_engine=default_engine)
