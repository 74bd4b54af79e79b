"""A feed that runs the diagnostics over what another feed yields."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from gputop.diagnose import Engine, Finding, default_engine
from gputop.feeds import PolledFeed
from gputop.model import Snapshot


class DiagnosedFeed:
    """A feed that runs the diagnostics engine over every snapshot (in a worker thread: a few ms
    a tick) and hands the open Findings to `listener` (the dashboard's findings panel)."""

    def __init__(self, feed: PolledFeed, engine: Engine) -> None:
        self.feed = feed
        self.engine = engine
        self.listener: Callable[[list[Finding]], None] | None = None

    def poll_once(self) -> Snapshot:
        snap = self.feed.poll_once()
        self._tell(self.engine.update(snap))
        return snap

    async def stream(self, interval: float) -> AsyncIterator[Snapshot]:
        first = True
        async for snap in self.feed.stream(interval):
            if first:  # the first frame does not wait for the diagnostics: they follow it
                first = False
                yield snap
                self._tell(await asyncio.to_thread(self.engine.update, snap))
                continue
            self._tell(await asyncio.to_thread(self.engine.update, snap))
            yield snap

    def _tell(self, findings: list[Finding]) -> None:
        if self.listener is not None:
            self.listener(findings)

    def close(self) -> None:
        self.feed.close()


def with_diagnostics(feed: PolledFeed) -> DiagnosedFeed:
    """`feed` diagnosed by the built-in diagnostics and the installed plug-ins."""
    return DiagnosedFeed(feed, default_engine())
