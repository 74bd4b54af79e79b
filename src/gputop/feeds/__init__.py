"""Feeds: where the dashboard, the recorder and the exporter get their Snapshots from.

A feed is anything with the `Feed` shape: the live poller (feeds.live), a recording played as if
live (feeds.playback, the demo), and feeds that wrap another: one that records what it passes on
(feeds.tee) and one that runs the diagnostics over it (feeds.diagnosed). `gputop replay`'s feed,
which can also seek, is replay.control.ReplayFeed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from gputop.model import Snapshot


class Feed(Protocol):
    """A source of Snapshots, one every `interval` seconds, as an async iterator that keeps its
    blocking calls off the event loop: what the dashboard consumes."""

    def stream(self, interval: float) -> AsyncIterator[Snapshot]: ...

    def close(self) -> None: ...


class PolledFeed(Feed, Protocol):
    """A feed that also gives one Snapshot when asked (blocking): what the recorder, the exporter
    and `--once` use."""

    def poll_once(self) -> Snapshot: ...


__all__ = ["Feed", "PolledFeed"]
