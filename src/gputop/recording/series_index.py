"""The ticks of a recording written in segments (docs/recording.md, "Segments") as one run: one
tick numbering and one clock across its files, any tick read in any order, and, following a
recording still being written, the next file taken up when the writer starts it.

Each file is indexed on its own (RecordingIndex); tick N of the series is tick N - start of the
file it falls in. The files are joined as SeriesReader joins them: the next one only if its
header has the same `series` and a later `segment`, with the same warnings when one is missing
or belongs to another run. A file written without segments is the whole recording.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gputop.errors import RecordingError
from gputop.model import DeviceSample, Snapshot
from gputop.recording.index import CACHE_TICKS, RecordingIndex, TickDamaged, TickReader, Timeline
from gputop.recording.reader import given_files
from gputop.recording.segments import _SEGMENT, next_segment, segment_paths

# A writer opens the next file as it finishes one, but a shared file system may show the new file
# a while later: following, a finished last file ends the replay only after this long without one.
NEXT_SEGMENT_WAIT_S = 30.0
READERS_OPEN = 4  # files a reader keeps open at once (a seek back and forth crosses one boundary)


class SeriesIndex(Timeline):
    """The ticks of a recording's files, given its first file (its segments are found) or the
    files (a shell's `run.gputop*`). Reads like a RecordingIndex of the whole run."""

    def __init__(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                 follow: bool = False, cache: int = CACHE_TICKS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(paths, (str, os.PathLike)):
            found = segment_paths(paths)
        else:
            found = given_files(paths)
        super().__init__(cache)
        self.path = found[0]
        self.follow = follow
        self.segments: list[RecordingIndex] = []
        self.starts: list[int] = []  # the series tick of each file's first tick
        self._warnings: list[str] = []  # about joining the files (theirs are their own)
        self._stopped = False  # a file of another run ended the series
        self._pending: RecordingIndex | None = None  # the next file, created but no header yet
        self._waiting_since: float | None = None  # when the last file was seen finished
        self._gave_up = False  # ... and no next file came: decided in refresh, as a file's end
        self._clock = clock
        try:
            first = RecordingIndex(found[0], follow=follow and len(found) == 1, cache=0)
            if follow and len(found) > 1 and _series_of(first.header) is None:
                first.close()  # the whole recording, which other files are only named like
                first = RecordingIndex(found[0], follow=True, cache=0)
            self._add(first)
            if self._series() is not None:
                for k, path in enumerate(found[1:], 2):
                    if not self._join(path, follow=follow and k == len(found)):
                        break
            if follow:
                self._take_up_next()
        except BaseException:
            self.close()
            raise

    @property
    def header(self) -> dict[str, Any] | None:
        return self.segments[0].header

    @property
    def warning(self) -> str | None:
        parts = [s.warning for s in self.segments if s.warning] + self._warnings
        return "; ".join(parts) or None

    @property
    def finished(self) -> bool:
        """No more ticks will come: the last file is finished and, following a series, no next
        file appeared within NEXT_SEGMENT_WAIT_S (or one of another run ended it)."""
        if not self.segments[-1].finished or self._pending is not None:
            return False
        return not self.follow or self._stopped or self._gave_up or self._series() is None

    def _stop(self, warning: str) -> None:
        self._stopped = True
        self.follow = False
        for segment in self.segments:  # the files after the damage are not read on
            segment.follow = False
        self._warnings.append(warning)

    def reader(self) -> SeriesTickReader:
        """A reader of the series' ticks, for one thread."""
        return SeriesTickReader(self)

    def refresh(self) -> int:
        """Reads what the writer appended since, moving on to its next file; returns how many
        ticks were new."""
        with self._lock:
            before = self.ticks
            last = self.segments[-1]
            last.refresh()
            self._extend(last)
            if self.follow:
                self._take_up_next()
            return self.ticks - before

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
        if self._pending is not None:
            self._pending.close()

    def __enter__(self) -> SeriesIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- joining the files ---------------------------------------------------------------------

    def _series(self) -> str | None:
        return _series_of(self.header)

    def _number(self) -> int:
        """The segment number of the last file."""
        number = (self.segments[-1].header or {}).get("segment")
        return number if isinstance(number, int) else 0

    def _add(self, segment: RecordingIndex) -> None:
        with self._lock:
            self.starts.append(self.ticks)
            self.segments.append(segment)
            self._extend(segment)

    def _extend(self, segment: RecordingIndex) -> None:
        have = self.ticks - self.starts[-1]
        if segment.ticks > have:
            self.times.extend(segment.times[have:])

    def _join(self, path: Path, *, follow: bool) -> bool:
        """Adds `path` if it is the next file of the series; False: the series ends before it."""
        try:
            segment = RecordingIndex(path, follow=follow, cache=0)
        except RecordingError as e:  # e.g. created by a writer killed right then: empty
            self._warnings.append(f"{e}; skipped")
            return True
        if segment.header is None:  # following: the writer has created it, not yet written it
            self._pending = segment
            return True
        return self._joined(segment)

    def _joined(self, segment: RecordingIndex) -> bool:
        series = self._series()
        assert series is not None
        got, warning = next_segment(segment.header or {}, series, self._number() + 1,
                                    segment.path, self.path)
        if warning:
            self._warnings.append(warning)
        if got is None:
            segment.close()
            self._stopped = True
            return False
        self._add(segment)
        return True

    def _take_up_next(self) -> None:
        """Following: once the last file is finished, the file the writer went on in."""
        while not self._stopped and self._series() is not None:
            if self._pending is None:
                last = self.segments[-1]
                if not last.finished:
                    return
                path = _next_path(last.path, self._number())
                if not path.exists():
                    if self._waiting_since is None:
                        self._waiting_since = self._clock()
                    self._gave_up = self._clock() - self._waiting_since >= NEXT_SEGMENT_WAIT_S
                    return
            try:
                if self._pending is None:
                    self._pending = RecordingIndex(path, follow=True, cache=0)
                else:
                    self._pending.refresh()
            except RecordingError as e:  # not a recording: the run cannot go on in it
                if self._pending is not None:
                    self._pending.close()
                    self._pending = None
                self._warnings.append(f"{e}; the replay ends before it")
                self._stopped = True
                return
            segment = self._pending
            if segment.header is None:
                return
            self._pending = None
            self._waiting_since, self._gave_up = None, False
            if not self._joined(segment):
                return


def _series_of(header: dict[str, Any] | None) -> str | None:
    """The run's id; None for a recording not written in segments (or no header yet)."""
    series = (header or {}).get("series")
    segment = (header or {}).get("segment")
    return series if isinstance(series, str) and isinstance(segment, int) else None


def _next_path(path: Path, number: int) -> Path:
    """Where the writer puts the segment after `path`, segment `number`: run.gputop.N+1."""
    m = _SEGMENT.fullmatch(path.name)
    base = m[1] if m and int(m[2]) == number else path.name
    return path.with_name(f"{base}.{number + 1}")


class SeriesTickReader:
    """Reads ticks of a SeriesIndex, each from the file it is in. Not shared between threads."""

    def __init__(self, index: SeriesIndex) -> None:
        self.index = index
        self._readers: OrderedDict[int, TickReader] = OrderedDict()

    def state(self, tick: int) -> dict[str, Any]:
        """Tick `tick` (from 0) in record form. Do not modify it."""
        reader, k = self._locate(tick)
        with self._in_series(tick - k):
            return reader.state(k)

    def snapshot(self, tick: int) -> Snapshot:
        snap = self.index._cached(tick)
        if snap is None:
            reader, k = self._locate(tick)
            with self._in_series(tick - k):
                snap = reader.snapshot(k)
            self.index._keep(tick, snap)
        return snap

    def devices(self, tick: int) -> tuple[DeviceSample, ...]:
        snap = self.index._cached(tick)
        if snap is not None:
            return snap.devices
        reader, k = self._locate(tick)
        with self._in_series(tick - k):
            return reader.devices(k)

    @contextlib.contextmanager
    def _in_series(self, start: int) -> Iterator[None]:
        """A damaged tick of a file, numbered in the series (its file starts at `start`)."""
        try:
            yield
        except TickDamaged as e:
            raise TickDamaged(e.message, start + e.tick) from None

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def _locate(self, tick: int) -> tuple[TickReader, int]:
        index = self.index
        if not 0 <= tick < index.ticks:
            raise IndexError(f"tick {tick} is not in the recording ({index.ticks} ticks)")
        i = bisect.bisect_right(index.starts, tick) - 1
        reader = self._readers.get(i)
        if reader is None:
            reader = self._readers[i] = index.segments[i].reader()
            while len(self._readers) > READERS_OPEN:
                self._readers.popitem(last=False)[1].close()
        else:
            self._readers.move_to_end(i)
        return reader, tick - index.starts[i]


def last_readable(index: SeriesIndex | RecordingIndex) -> tuple[Snapshot, str | None]:
    """The last tick of a recording that can be read, and what was said of the rest: a tick
    the index took (it reads only their times) may turn out damaged when decoded, and the
    recording is then read up to it, as every reader reads it."""
    warnings = [index.warning] if index.warning else []
    reader: SeriesTickReader | TickReader = index.reader()
    tick = index.ticks - 1
    try:
        while True:
            try:
                return reader.snapshot(tick), "; ".join(warnings) or None
            except TickDamaged as e:
                if e.tick == 0:
                    raise RecordingError(f"{index.path}: no tick of the recording can be read",
                                         hint=e.message) from None
                warnings.append(f"{e.message}; read up to it")
                tick = min(tick, e.tick) - 1
    finally:
        reader.close()
