"""Any tick of a recording, in any order, and the ticks a writer is still appending.

A recording is one gzip stream (docs/recording.md), so reading tick N means inflating every byte
before it, and keeping a day of decoded ticks would take gigabytes. Opening a recording therefore
indexes it without decoding it: the time of each tick, read from the start of its line, and at
every keyframe a place where inflating can resume (a copy of the inflater, as zlib's zran.c
does). Reading tick N then inflates from the keyframe before it and applies at most a few hundred
patches. `refresh` reads what a writer has appended since: the writer flushes the deflate stream
after every tick, so every complete tick in the file can be inflated while the file grows.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import threading
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gputop.errors import RecordingError
from gputop.model import DeviceSample, Snapshot, from_dict
from gputop.recording.checks import MAX_LINE, check_header, check_input, parse_line
from gputop.recording.format import (
    KEYFRAME_EVERY,
    VERSION,
    SnapshotDecoder,
    inflate_damage,
    known_line,
    next_state,
    skipped_lines,
)

CHUNK = 1 << 16  # compressed bytes read at a time
MAX_GAP = 2 * KEYFRAME_EVERY  # a writer that rarely writes keyframes gets a resume point this often
CACHE_TICKS = 1024  # decoded Snapshots kept, shared by the readers of one recording
_GZIP_WBITS = 31
# The time of a tick without parsing its line: gputop writes "time" first in a patch and second,
# after "schema", in a keyframe. Lines of any other shape are parsed.
_TIME = re.compile(rb'\{"(k|d)":\{(?:"schema":"[^"\\]*",)?"time":(-?[0-9][0-9.eE+-]*)[,}]')


@dataclass(frozen=True)
class _Resume:
    """Where inflating can start again so that the first line out is a given tick's."""

    offset: int  # file offset of the compressed chunk to read
    inflater: Any  # a copy of the inflater as it was before that chunk (zlib.Decompress)
    head: bytes  # the start of the line, inflated from earlier chunks
    skip: int  # bytes of the chunk's output that come before the line


@dataclass(frozen=True)
class _Checkpoint:
    tick: int
    resume: _Resume
    before: bytes | None  # the previous tick in record form (JSON), or None: `tick` is a keyframe


class Timeline:
    """The ticks' times and a small cache of decoded ticks, shared by the readers of an index
    (one file or a whole series)."""

    def __init__(self, cache: int) -> None:
        self.times: array[float] = array("d")  # epoch s of each tick
        self._lock = threading.RLock()
        self._cache: OrderedDict[int, Snapshot] = OrderedDict()
        self._cache_size = cache

    @property
    def ticks(self) -> int:
        return len(self.times)

    def time(self, tick: int) -> float:
        return self.times[tick]

    def tick_at(self, t: float) -> int:
        """The last tick taken at or before `t` (the first tick if `t` is before it)."""
        return max(0, bisect.bisect_right(self.times, t) - 1)

    def cut(self, tick: int, why: str) -> None:
        """Ends the recording before `tick`, found damaged when it was decoded (the index reads
        only the ticks' times): from then on it reads as a file damaged there."""
        with self._lock:
            del self.times[tick:]
            for k in [k for k in self._cache if k >= tick]:
                del self._cache[k]
            self._stop(f"{why}; read up to it")

    def _stop(self, warning: str) -> None:
        raise NotImplementedError

    def _cached(self, tick: int) -> Snapshot | None:
        with self._lock:
            snap = self._cache.get(tick)
            if snap is not None:
                self._cache.move_to_end(tick)
            return snap

    def _keep(self, tick: int, snap: Snapshot) -> None:
        with self._lock:
            self._cache[tick] = snap
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


class RecordingIndex(Timeline):
    """The ticks of one recording file. `ticks` grows when `refresh` finds more."""

    def __init__(self, path: str | os.PathLike[str], *, follow: bool = False,
                 cache: int = CACHE_TICKS) -> None:
        super().__init__(cache)
        self.path = Path(path)
        self.follow = follow
        self.header: dict[str, Any] | None = None
        self.warning: str | None = None
        self.finished = False  # the stream's end marker was read (or damage): no more ticks
        self._checkpoints: list[_Checkpoint] = []
        self._cp_ticks: list[int] = []
        self._f = _open(self.path)
        self._z = zlib.decompressobj(_GZIP_WBITS)
        self._offset = 0
        self._pending = b""  # inflated bytes of a line not yet complete
        self._since_cp = 0
        self._skipped = 0  # lines of a kind this version does not read
        self._helper: TickReader | None = None  # builds resume points where keyframes are rare
        try:
            magic = self._f.read(2)
            if magic and magic != b"\x1f\x8b"[:len(magic)]:
                raise RecordingError(f"{self.path} is not a gputop recording",
                                     hint="expected a gzip stream of JSON lines")
            self._f.seek(0)
            self.refresh()
            if self.header is None and not follow:
                raise RecordingError(f"{self.path} is empty or damaged before its header")
        except BaseException:
            self.close()
            raise

    def reader(self) -> TickReader:
        """A reader of this recording's ticks, for one thread."""
        return TickReader(self)

    def _stop(self, warning: str) -> None:
        self.finished = True
        self.follow = False
        self.warning = "; ".join(filter(None, [self.warning, warning]))

    def close(self) -> None:
        self._f.close()
        if self._helper is not None:
            self._helper.close()

    def __enter__(self) -> RecordingIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- indexing ------------------------------------------------------------------------------

    def refresh(self) -> int:
        """Indexes what the file holds beyond what was read; returns how many ticks were new."""
        with self._lock:
            before = self.ticks
            while not self.finished:
                chunk = self._f.read(CHUNK)
                if not chunk:
                    break
                self._inflate(chunk)
            if not self.follow and not self.finished and self.warning is None:
                self.warning = (f"{self.path} ends without its end marker (still being written, "
                                "or the writer stopped); read every complete tick")
                if self._pending:
                    self.warning = (f"{self.path} ends in the middle of a tick; that tick "
                                    "was dropped")
            if self._skipped and (self.finished or not self.follow):
                said = skipped_lines(self.path, self._skipped)
                if said not in (self.warning or ""):
                    self.warning = "; ".join(filter(None, [self.warning, said]))
            return self.ticks - before

    def _inflate(self, chunk: bytes) -> None:
        offset = self._offset
        self._offset += len(chunk)
        before = self._z.copy()
        self._z, out, error = _inflate(self._z, chunk)
        damaged = error is not None
        if error is not None:
            self.warning = inflate_damage(self.path, error)
        head = self._pending
        data = head + out
        start = 0
        while (end := data.find(b"\n", start)) >= 0:

            def resume(start: int = start) -> _Resume:
                if start < len(head):
                    return _Resume(offset, before, head[start:], 0)
                return _Resume(offset, before, b"", start - len(head))

            if not self._index_line(data, start, end, resume):
                damaged = True
                break
            start = end + 1
        self._pending = data[start:]
        if not damaged and len(self._pending) > MAX_LINE:
            self.warning = (f"{self.path}: tick {self.ticks + 1} is damaged (a line longer "
                            f"than {MAX_LINE >> 20} MiB); read up to it")
            damaged = True
        if damaged:
            self.finished = True
            self._pending = b""
        elif self._z.eof:
            self.finished = True
            rest = self._z.unused_data
            # Gzip members after the ticks' (the summary, docs/recording.md) hold no ticks.
            if rest.strip(b"\0") and not b"\x1f\x8b".startswith(rest[:2]):
                self.warning = f"{self.path} has trailing data after its end; ignored"

    def _index_line(self, data: bytes, start: int, end: int, resume: Any) -> bool:
        """Takes the line data[start:end]; False when it is damaged (indexing stops there)."""
        if self.header is None:
            self.header = check_header(self.path, data[start:end], VERSION)
            return True
        if end - start > MAX_LINE:
            self.warning = (f"{self.path}: tick {self.ticks + 1} is damaged (a line longer "
                            f"than {MAX_LINE >> 20} MiB); read up to it")
            return False
        n = self.ticks
        m = _TIME.match(data, start, end)  # a tick is read without copying its line
        if m is not None:
            kind, t = m.group(1).decode(), float(m.group(2))
        else:
            try:
                rec = parse_line(data[start:end])
                kind, t = _kind_and_time(rec, self.times[-1] if n else None)
            except (ValueError, TypeError) as e:
                self.warning = f"{self.path}: tick {n + 1} is damaged ({e}); read up to it"
                return False
            if kind is None:  # a line type from a newer minor version: not a tick
                self._skipped += not known_line(rec)
                return True
        if kind == "k":
            self._add_checkpoint(_Checkpoint(n, resume(), None))
        elif n == 0:
            self.warning = f"{self.path}: tick 1 is damaged (a delta before any keyframe)"
            return False
        elif self._since_cp >= MAX_GAP:
            if self._helper is None:
                self._helper = TickReader(self)
            try:
                before = json.dumps(self._helper.state(n - 1), separators=(",", ":"))
            except RecursionError:
                self.warning = f"{self.path}: tick {n} is damaged (nested too deeply)"
                return False
            except RecordingError as e:
                self.warning = str(e)
                return False
            self._add_checkpoint(_Checkpoint(n, resume(), before.encode()))
        self.times.append(t)
        self._since_cp += 1
        return True

    def _add_checkpoint(self, cp: _Checkpoint) -> None:
        self._checkpoints.append(cp)
        self._cp_ticks.append(cp.tick)
        self._since_cp = 0

    def _checkpoint_for(self, tick: int) -> _Checkpoint:
        with self._lock:
            return self._checkpoints[bisect.bisect_right(self._cp_ticks, tick) - 1]

    # -- the shared cache of decoded ticks -----------------------------------------------------



class TickReader:
    """Reads ticks of a RecordingIndex: the next one cheaply, any other from the resume point
    before it. Not shared between threads: each has its own file handle and inflater."""

    def __init__(self, index: RecordingIndex) -> None:
        self.index = index
        self._f = _open(index.path)
        self._lines: Iterator[bytes] | None = None
        self._state: dict[str, Any] | None = None
        self._pos = -1  # the tick `_state` is
        self._decoder = SnapshotDecoder()  # shares what did not change since the last tick read

    def state(self, tick: int) -> dict[str, Any]:
        """Tick `tick` (from 0) in record form. Do not modify it: it is shared with later ticks."""
        if not 0 <= tick < self.index.ticks:
            raise IndexError(f"tick {tick} is not in the recording ({self.index.ticks} ticks)")
        cp = self.index._checkpoint_for(tick)
        if self._lines is None or self._pos > tick or self._pos < cp.tick - 1:
            self._restore(cp)
        while self._pos < tick:
            self._advance()
        assert self._state is not None
        return self._state

    def snapshot(self, tick: int) -> Snapshot:
        snap = self.index._cached(tick)
        if snap is None:
            state = self.state(tick)
            try:
                snap = self._decoder.decode(state)
            except (ValueError, KeyError, TypeError) as e:
                raise self._damaged(tick, e) from None
            self.index._keep(tick, snap)
        return snap

    def devices(self, tick: int) -> tuple[DeviceSample, ...]:
        """Only the GPUs of a tick: a quarter of the work of its whole Snapshot."""
        snap = self.index._cached(tick)
        if snap is not None:
            return snap.devices
        try:
            return tuple(from_dict(DeviceSample, d)
                         for d in (self.state(tick).get("devices") or {}).values())
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise self._damaged(tick, e) from None

    def close(self) -> None:
        self._f.close()

    def _restore(self, cp: _Checkpoint) -> None:
        r = cp.resume
        self._f.seek(r.offset)
        self._lines = self._read_lines(r.inflater.copy(), r.head, r.skip)
        self._state = json.loads(cp.before) if cp.before is not None else None
        self._pos = cp.tick - 1

    def _read_lines(self, z: Any, buf: bytes, skip: int) -> Iterator[bytes]:
        while True:
            chunk = self._f.read(CHUNK)
            if not chunk:
                # The index has seen this tick complete, so the file was cut or replaced.
                raise RecordingError(f"{self.index.path} changed while being read",
                                     hint="open it again")
            z, out, error = _inflate(z, chunk)
            if skip:
                out, skip = out[skip:], max(0, skip - len(out))
            buf += out
            *complete, buf = buf.split(b"\n")
            yield from complete
            if error is not None:
                raise RecordingError(f"{self.index.path} is damaged ({error})")
            if len(buf) > MAX_LINE:  # the index saw no such line: the file was replaced
                raise RecordingError(f"{self.index.path} changed while being read",
                                     hint="open it again")

    def _advance(self) -> None:
        assert self._lines is not None
        tick = self._pos + 1
        try:
            state = None
            while state is None:
                try:
                    line = next(self._lines)
                except RecordingError as e:
                    raise ValueError(e.message.removeprefix(f"{self.index.path} ")) from None
                state = next_state(self._state, parse_line(line))
        except (ValueError, KeyError, TypeError) as e:
            self._lines = None
            raise self._damaged(tick, e) from None
        self._state = state
        self._pos = tick

    def _damaged(self, tick: int, e: Exception) -> TickDamaged:
        return TickDamaged(f"{self.index.path}: tick {tick + 1} is damaged ({e})", tick)


class TickDamaged(RecordingError):
    """Tick `tick` (from 0) of a recording cannot be read: the ticks before it can."""

    def __init__(self, message: str, tick: int) -> None:
        super().__init__(message)
        self.tick = tick


def _inflate(z: Any, chunk: bytes) -> tuple[Any, bytes, zlib.error | None]:
    """(inflater, what `chunk` inflates to, the error that stopped it): on damage, what
    precedes it is kept (inflated again a byte at a time). A chunk that inflates to more than
    MAX_LINE is damage too: gputop's ticks compress about 10 to 1, and inflating on would
    let a file of a megabyte take gigabytes."""
    saved = z.copy()
    try:
        out = z.decompress(chunk, MAX_LINE + 1)
        if z.unconsumed_tail:
            return z, out, zlib.error(f"{CHUNK >> 10} KiB inflating to more than "
                                      f"{MAX_LINE >> 20} MiB")
        return z, out, None
    except zlib.error:
        pass
    z, out = saved, b""
    for i in range(len(chunk)):
        try:
            out += z.decompress(chunk[i:i + 1])
        except zlib.error as e:
            return z, out, e
        if len(out) > MAX_LINE:
            return z, out, zlib.error(f"inflating to more than {MAX_LINE >> 20} MiB")
    return z, out, None


def _open(path: Path) -> IO[bytes]:
    check_input(path)
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RecordingError(f"{path}: is a directory, not a recording") from None
    except OSError as e:
        raise RecordingError(f"cannot open {path}: {e.strerror or e}") from None


def _kind_and_time(rec: Any, previous: float | None) -> tuple[str | None, float]:
    """("k" or "d", the tick's time) of a parsed line; (None, 0) for a line that is not a tick."""
    if not isinstance(rec, dict):
        raise TypeError("a line that is not an object")
    if "k" in rec:
        body, kind = rec["k"], "k"
    elif "d" in rec:
        body, kind = rec["d"], "d"
    else:
        return None, 0.0
    if not isinstance(body, dict):
        raise TypeError("a tick that is not an object")
    t = body.get("time", previous if kind == "d" else None)
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        raise ValueError("a tick without a time")
    return kind, float(t)
