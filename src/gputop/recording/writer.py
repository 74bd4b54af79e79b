"""Writing a recording (docs/recording.md): RecordingWriter appends Snapshots, one flushed gzip
stream a file, in segments of bounded size when asked, and ends each file it finishes with the
summary its summarizer (given by the caller) makes of it."""

from __future__ import annotations

import errno
import json
import math
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from gputop import __version__
from gputop.errors import RecordingError
from gputop.model import (
    DictMemo,
    Snapshot,
)
from gputop.recording.format import (
    FOOTER_SIZE,
    FORMAT,
    GZIP_WBITS,
    ITEMS,
    KEYFRAME_EVERY,
    SUMMARY,
    VERSION,
    diff,
    footer,
    footer_of,
    to_record,
)
from gputop.recording.segments import segment_paths
from gputop.safetext import encodable_tree

# zlib's level 7 with its strategy for data of many small numbers (Z_FILTERED: fewer short
# matches, more left to Huffman coding). A tick's patch repeats the keys of the ticks before
# it, so the higher levels walk long chains of earlier matches for little: on a live 8-GPU node
# with 144 NVLinks level 7 takes 0.08 ms a tick against level 8's 0.17 and writes 4 % more
# (2.85 MB per GPU-day against 2.74); the demo 0.26 ms against 0.47, 6 % more. Level 6 takes
# 0.06 ms and writes 6-8 % more (bench/record_bench.py --level).
COMPRESSION_LEVEL = 7
COMPRESSION_STRATEGY = zlib.Z_FILTERED
_GZIP_END = 16  # bytes that finishing a stream adds at most: an empty last block, the trailer


# ----------------------------------------------------------------------------------------------
# Writing


def round_to_sensor(rec: dict[str, Any], fresh: set[int] | None = None,
                    last: Mapping[str, Any] | None = None) -> None:
    """Drops the digits no sensor measured from a tick in record form (docs/recording.md).

    CPU % per core and per process is counted in clock ticks (1 % of a core a second) and is
    kept whole; the node's total CPU % to 0.1; throughputs in bytes/s (PCIe, NVLink) to 3
    significant digits. The digits dropped are noise, which costs bytes that no compression
    wins back. With `fresh` (ids of the dicts built for this tick), the dicts not in it were
    rounded on an earlier tick and are left alone; with `last` too (the tick before, in record
    form), so are the keyed objects it holds the very same of (the links between slow ticks)."""
    host = rec.get("host")
    if host and (fresh is None or id(host) in fresh):
        cores = host.get("cpu_percent_per_core")
        if cores:
            host["cpu_percent_per_core"] = [_whole(c) for c in cores]
        for k in ("cpu_percent", "iowait_percent"):
            if _is_number(v := host.get(k)):
                host[k] = round(v, 1)
    for p in _to_round(rec, "processes", fresh, last):
        if _is_number(v := p.get("cpu_percent")):
            p["cpu_percent"] = _whole(v)
        for c in p.get("children") or ():
            if _is_number(v := c.get("cpu_percent")):
                c["cpu_percent"] = _whole(v)
    for d in _to_round(rec, "devices", fresh, last):
        for k in ("pcie_rx", "pcie_tx"):
            if _is_number(v := d.get(k)):
                d[k] = _significant(v)
    for lk in _to_round(rec, "links", fresh, last):  # a hundred and more on a slow tick
        for k in ("rx", "tx"):
            # A float (the common case) first, without the call that _is_number costs.
            if type(v := lk.get(k)) is float or _is_number(v):
                lk[k] = _significant(v)


def _to_round(rec: Mapping[str, Any], part: str, fresh: set[int] | None,
              last: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The objects of a keyed part of `rec` that round_to_sensor has not rounded before."""
    items = rec.get(part)
    if not items or (last is not None and fresh is not None and last.get(part) is items):
        return []
    if fresh is None:
        return list(items.values())
    return [x for x in items.values() if id(x) in fresh]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _whole(v: Any) -> Any:
    return float(round(v)) if _is_number(v) and math.isfinite(v) else v


def _significant(v: Any) -> float:
    return float(f"{v:.3g}")


def _deflate() -> zlib._Compress:
    return zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, GZIP_WBITS, 8,
                            COMPRESSION_STRATEGY)  # 8: zlib's default memLevel


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # json.dumps, made once


def _line(obj: Mapping[str, Any]) -> bytes:
    text = _JSON.encode(obj)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:  # undecodable bytes in some text: kept as visible escapes
        return json.dumps(encodable_tree(obj), separators=(",", ":"),
                          ensure_ascii=False).encode() + b"\n"


class Summarizer(Protocol):
    """What a writer is given to summarize each file it writes (gputop.report.summary)."""

    def add(self, rec: dict[str, Any], patch: dict[str, Any] | None,
            snap: Snapshot | None = None) -> None:
        """One tick as written: in record form, the patch it was written as (None for a
        keyframe), and the Snapshot it was made from."""

    def summary(self, series: str | None, segment: int | None) -> dict[str, Any]:
        """The summary of the file being written, up to now."""

    def next_file(self) -> None:
        """The writer starts the next file of a series."""


class RecordingWriter:
    """Appends Snapshots to a recording. Every `write` reaches the OS before it returns.

    With `max_bytes` the recording is a series of files, its segments: `path`, then `path.1`,
    `path.2`, ... When the next tick would take the current segment past `max_bytes`, the segment
    is finished (a complete recording on its own) and the tick opens the next one with a header
    and a keyframe, so every segment reads on its own. With `keep`, only the newest `keep`
    segments stay on disk: starting a segment deletes the oldest beyond them.

    With a `summarizer` (gputop.report.summary.SummaryKeeper for `gputop report`) each file it
    finishes ends with the summary the summarizer made of its ticks (docs/recording.md); without
    one the files end after their last tick.
    report` (docs/recording.md); a segment too small to hold one goes without."""

    def __init__(self, path: str | os.PathLike[str], *, meta: Mapping[str, Any] | None = None,
                 fsync: bool = False, keyframe_every: int = KEYFRAME_EVERY,
                 max_bytes: int | None = None, keep: int | None = None,
                 summarizer: Summarizer | None = None) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        if keep is not None and (keep < 1 or max_bytes is None):
            raise ValueError("keep needs max_bytes and must be at least 1")
        self.path = Path(path)
        self.ticks = 0
        self.bytes_written = 0  # in every segment, including those deleted since
        self.segments: list[Path] = []  # on disk, oldest first; the last is being written
        self._meta = dict(meta or {})
        self._fsync = fsync
        self._keyframe_every = keyframe_every
        self._max_bytes = max_bytes
        self._keep = keep
        self._prev: dict[str, Any] | None = None
        self._memo = DictMemo(like=ITEMS)
        self._keys: dict[Any, tuple[Any, Any]] = {}  # to_record's keys of the memo's dicts
        self._since_keyframe = 0
        self._broken = False
        self._deleted = 0  # segments deleted to honour `keep`
        self._series = os.urandom(8).hex() if max_bytes is not None else None
        self._summary = summarizer
        self._summary_room = 0  # bytes kept free in a segment for its summary
        self._no_summary: str | None = None  # why the file being written goes without one
        self._z: zlib._Compress  # the segment's deflate stream, and its size so far:
        self._segment_bytes = self._segment_ticks = 0  # set by _open
        if max_bytes is not None:
            stale = segment_paths(self.path)
            if stale and stale != [self.path]:
                raise RecordingError(f"{stale[-1]} already exists",
                                     hint="remove the old segments or choose another file name")
        self._open(self.path)

    @property
    def current_path(self) -> Path:
        """The segment being written."""
        return self.segments[-1]

    def write(self, snap: Snapshot) -> None:
        if self._broken:
            raise RecordingError(f"{self.path}: recording stopped after a write error")
        # An object the source handed again unchanged keeps its dict (rounded alike again):
        # its patch is empty and the summary's decoder reuses what it built from it.
        rec = to_record(snap, self._memo, self._keys)
        round_to_sensor(rec, fresh=self._memo.built, last=self._prev)
        keyframe = self._prev is None or self._since_keyframe >= self._keyframe_every
        unlike: list[str] = []  # values left out of the patch as equal to the last tick's
        patch = None if keyframe else diff(self._prev or {}, rec, self._memo.since, unlike)
        self._memo.next_tick()
        line = _line({"k": rec} if patch is None else {"d": patch})
        z = self._z.copy() if self._max_bytes is not None else self._z
        chunk = z.compress(line) + z.flush(zlib.Z_SYNC_FLUSH)
        if (self._max_bytes is not None and self._segment_ticks > 0
                and self._segment_bytes + len(chunk) + _GZIP_END + self._summary_room
                > self._max_bytes):
            self._next_segment()
            keyframe, patch, z = True, None, self._z
            chunk = z.compress(_line({"k": rec})) + z.flush(zlib.Z_SYNC_FLUSH)
        self._write(chunk)
        self._z = z
        self._prev = rec
        self._since_keyframe = 1 if keyframe else self._since_keyframe + 1
        self._segment_ticks += 1
        self.ticks += 1
        if self._summary is not None:
            # Where the patch left out an equal value of another kind (1.0 after 1), a reader
            # keeps the one before: the summary reads such ticks back as a reader does.
            self._summarize(rec, patch, keyframe, None if unlike and not keyframe else snap)

    def _summarize(self, rec: dict[str, Any], patch: dict[str, Any] | None,
                   keyframe: bool, snap: Snapshot | None) -> None:
        assert self._summary is not None
        try:
            self._summary.add(rec, patch, snap)
            n = self._segment_ticks
            if self._max_bytes is not None and (keyframe or n & (n - 1) == 0):
                # Keep room for the summary as it grows: it is measured at 1, 2, 4 ... ticks
                # and at every keyframe, and about doubles at most in between (findings add a
                # little more). One that would take over a quarter of a segment is not worth
                # it: such small segments go without.
                need = 2 * len(self._summary_member()) + 16384 + FOOTER_SIZE
                self._summary_room = need if need <= self._max_bytes // 4 else FOOTER_SIZE
                self._no_summary = None if need <= self._max_bytes // 4 else "size"
        except Exception:  # a summary is an extra: the recording goes on without it
            self._drop_summary()

    def _drop_summary(self) -> None:
        self._summary = None
        self._summary_room = FOOTER_SIZE
        self._no_summary = "error"

    def _summary_member(self) -> bytes:
        z = _deflate()
        segment = len(self.segments) - 1 + self._deleted if self._series is not None else None
        assert self._summary is not None
        body = self._summary.summary(self._series, segment)
        # What it vouches for: the bytes before it, so that a reader can tell ticks changed
        # since (a flipped bit) from ticks it may take the summary for.
        body["covers"] = {"bytes": self._segment_bytes, "crc32": self._crc}
        return z.compress(_line({SUMMARY: body})) + z.flush(zlib.Z_FINISH)

    def _open(self, path: Path) -> None:
        try:
            # Unbuffered: a write that fails leaves nothing behind to be written at close.
            self._f: IO[bytes] = open(path, "xb", buffering=0)  # noqa: SIM115 - _finish()
        except FileExistsError:
            self._broken = bool(self.segments)
            raise RecordingError(f"{path} already exists",
                                 hint="choose another file name or remove it first") from None
        except OSError as e:
            self._broken = bool(self.segments)
            raise RecordingError(f"cannot create {path}: {e.strerror or e}") from None
        self.segments.append(path)
        self._z = _deflate()
        self._segment_bytes = self._segment_ticks = 0
        self._crc = 0  # of the segment's bytes so far: its summary vouches for them
        header: dict[str, Any] = {"type": "header", "format": FORMAT, "version": VERSION,
                                  "gputop": __version__, "meta": self._meta}
        if self._series is not None:
            header["series"] = self._series
            header["segment"] = len(self.segments) - 1 + self._deleted
        z = self._z
        self._write(z.compress(_line(header)) + z.flush(zlib.Z_SYNC_FLUSH))

    def _next_segment(self) -> None:
        """Finishes the current segment and starts the next, deleting the oldest beyond `keep`."""
        e = self._finish()
        if e is not None:
            raise RecordingError(f"cannot write {self.current_path}: {e.strerror or e}",
                                 hint=f"the {self.ticks} ticks written before are kept")
        n = len(self.segments) + self._deleted
        self._open(self.path.with_name(f"{self.path.name}.{n}"))
        while self._keep is not None and len(self.segments) > self._keep:
            old = self.segments.pop(0)
            self._deleted += 1
            try:
                old.unlink()
            except OSError:
                pass  # gone already, or not ours to delete: recording goes on

    def _write(self, chunk: bytes) -> None:
        try:
            _write_all(self._f, chunk)
            if self._fsync:
                os.fsync(self._f.fileno())
        except OSError as e:
            # The compressor has taken a tick the file lacks: finishing the stream now would
            # write a checksum over it. Stop here, cut off what part of the tick reached the
            # disk: the file reads to its last tick.
            self._broken = True
            self._cut(self._segment_bytes)
            raise RecordingError(
                f"cannot write {self.current_path}: {e.strerror or e}",
                hint=f"the {self.ticks} ticks written before are kept",
            ) from None
        self.bytes_written += len(chunk)
        self._segment_bytes += len(chunk)
        self._crc = zlib.crc32(chunk, self._crc)

    def _finish(self) -> OSError | None:
        """Ends the current segment's gzip stream (unless a write failed), appends its summary
        and closes it."""
        if self._f.closed:
            return None
        try:
            if not self._broken:
                end = self._z.flush(zlib.Z_FINISH)
                _write_all(self._f, end)
                self.bytes_written += len(end)
                self._segment_bytes += len(end)
                self._crc = zlib.crc32(end, self._crc)
                self._append_summary()
        except OSError as e:
            self._broken = True  # the file lacks only its end marker: it reads to its last tick
            self._cut(self._segment_bytes)
            return e
        finally:
            try:
                self._f.close()
            except OSError:
                pass  # unbuffered: nothing is left to write
        if self._summary is not None:
            try:
                self._summary.next_file()  # may take ticks it was given and had left waiting
            except Exception:
                self._drop_summary()
        return None

    def _append_summary(self) -> None:
        """The summary's gzip member, then the footer saying where it starts; a file whose
        summary could not be made or has no room gets a footer saying why instead (when that
        fits). Where writing them fails, the file ends at its ticks' end marker."""
        if self._summary is None and self._no_summary is None:
            return  # written without summaries
        at = self._segment_bytes
        why = self._no_summary
        data = b""
        if why is None:
            try:
                member = self._summary_member()
            except Exception:  # a summary is an extra: the file is complete without it
                self._summary = None
                why = self._no_summary = "error"
            else:
                if (self._max_bytes is not None
                        and at + len(member) + FOOTER_SIZE > self._max_bytes):
                    why = "size"
                else:
                    data = member + footer(at, len(member))
        if why is not None:
            if self._max_bytes is not None and at + FOOTER_SIZE > self._max_bytes:
                return
            data = footer_of({"no_summary": why})
        try:
            _write_all(self._f, data)
            if self._fsync:
                os.fsync(self._f.fileno())
        except OSError:
            self._cut(at)  # back to a complete file without a summary
            raise
        self.bytes_written += len(data)
        self._segment_bytes += len(data)

    def _cut(self, size: int) -> None:
        """Cuts the file being written back to `size` bytes (what a failed write left)."""
        try:
            self._f.truncate(size)
        except OSError:
            pass  # a reader drops the part of a tick at the end anyway

    def close(self) -> None:
        """Finishes the file. RecordingError when finishing it failed (its ticks are kept)."""
        e = self._finish()
        if e is not None:
            raise RecordingError(f"cannot finish {self.current_path}: {e.strerror or e}",
                                 hint=f"the {self.ticks} ticks written before are kept")

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_all(f: IO[bytes], data: bytes) -> None:
    """Writes all of `data` to an unbuffered file (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise OSError(errno.EIO, "the file took no more bytes")
        view = view[n:]
