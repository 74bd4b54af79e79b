"""Feeds: where the dashboard, the recorder and the exporter get their Snapshots from.

A feed is anything with the `Feed` shape: the live poller (feeds.live), a recording played as if
live (feeds.playback, the demo), and feeds that wrap another: one that records what it passes on
(feeds.tee) and one that runs the diagnostics over it (feeds.diagnosed). `gputop replay`'s feed,
which can also seek, is replay.control.ReplayFeed."""

from __future__ import annotations

import gc
import sys
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


# Once start-up is over, the collector's youngest generation is collected after this many new
# objects instead of Python's 700: a tick leaves some hundreds that live for minutes (the
# diagnostics keep ten minutes of Snapshots), so at 700 a collection came every tick or two and
# walked them all.
STEADY_GC_THRESHOLD = 10_000

GcSettings = tuple[tuple[int, int, int], int]  # thresholds, and how many objects were frozen


def settle_gc() -> GcSettings:
    """For a process that consumes a feed for hours (the dashboard, the recorder), once its
    start-up is over: what start-up built (modules, widgets, the GPUs' handles) lives as long as
    the process, and frozen, the garbage collector no longer walks it (a full sweep of the
    running dashboard took about 50 ms of CPU with it and a few ms without). From then on the
    youngest generation is collected every STEADY_GC_THRESHOLD new objects. Returns what it
    replaced, for `unsettle_gc`."""
    was = gc.get_threshold(), gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    young, older, oldest = was[0]
    gc.set_threshold(max(young, STEADY_GC_THRESHOLD), older, oldest)
    return was


# glibc's mallopt parameter for the most heaps ("arenas") threads may allocate from.
M_ARENA_MAX = -8


def one_malloc_arena() -> bool:
    """For a process that consumes a feed for hours, before it starts a thread: every thread
    allocating alongside another gets a heap of its own from glibc, kept for the life of the
    process. The dashboard's short-lived threads (a PCIe throughput sample per GPU, the slow
    NVML tick, asyncio's executor, Textual's input and output) left a dozen behind, about
    0.9 MiB resident on an 8-GPU node; their allocations outside the GIL are few and short, so
    one heap serves them. False where the C library is not glibc (nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # loaded with NVIDIA's binding anyway

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # glibc's own: musl's mallopt does nothing
        return False
    return bool(libc.mallopt(M_ARENA_MAX, 1))


def unsettle_gc(was: GcSettings) -> None:
    """The collector as it was before `settle_gc` (tests run many commands in one process)."""
    gc.set_threshold(*was[0])
    if not was[1]:
        gc.unfreeze()


__all__ = ["STEADY_GC_THRESHOLD", "Feed", "GcSettings", "PolledFeed", "one_malloc_arena",
           "settle_gc", "unsettle_gc"]
