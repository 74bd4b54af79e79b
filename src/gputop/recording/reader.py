"""Reading a recording: one file (RecordingReader), or a run written in segments as one
(SeriesReader). A truncated or damaged tail costs only the ticks after the damage."""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gputop.errors import RecordingError
from gputop.model import (
    Snapshot,
)
from gputop.recording.checks import MAX_LINE, check_header, check_input, parse_line
from gputop.recording.format import (
    GZIP_MAGIC,
    GZIP_WBITS,
    VERSION,
    SnapshotDecoder,
    inflate_damage,
    known_line,
    next_state,
    skipped_lines,
    summary_place,
)
from gputop.recording.segments import _segment_order, next_segment, segment_paths

CHUNK = 1 << 16  # compressed bytes read at a time

# ----------------------------------------------------------------------------------------------
# Reading


@dataclass
class ReadResult:
    header: dict[str, Any]
    snapshots: list[Snapshot]
    warning: str | None = None


class RecordingReader:
    """Reads a recording, tolerating a truncated or damaged tail.

    `warning` is set (after iteration) when the file ended early or was damaged; every tick before
    the damage is still returned."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.warning: str | None = None
        self.header: dict[str, Any] = {}
        self.ticks = 0
        check_input(self.path)
        try:
            self._f: IO[bytes] = open(self.path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            raise RecordingError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise RecordingError(f"{self.path}: is a directory, not a recording") from None
        except OSError as e:
            raise RecordingError(f"cannot open {self.path}: {e.strerror or e}") from None
        magic = self._f.read(2)
        self._f.seek(0)
        if magic != b"\x1f\x8b":
            self._f.close()
            raise RecordingError(f"{self.path} is not a gputop recording",
                                 hint="expected a gzip stream of JSON lines")
        lines = self._lines()
        try:
            first = next(lines)
        except StopIteration:
            self._f.close()
            raise RecordingError(f"{self.path} is empty or damaged before its header") from None
        try:
            header = check_header(self.path, first, VERSION)
        except RecordingError:
            self._f.close()
            raise
        self.header = header
        self._rest = lines

    def _lines(self) -> Iterator[bytes]:
        """The file's lines, up to the first damage; none longer than MAX_LINE."""
        buf = b""
        lines = 0  # yielded, the header first
        for piece in self._inflated():
            buf += piece
            *complete, buf = buf.split(b"\n")
            if len(buf) > MAX_LINE or any(len(line) > MAX_LINE for line in complete):
                ok = list(itertools.takewhile(lambda line: len(line) <= MAX_LINE, complete))
                self.warning = (f"{self.path}: tick {lines + len(ok)} is damaged (a line "
                                f"longer than {MAX_LINE >> 20} MiB); read up to it")
                yield from ok
                return
            lines += len(complete)
            yield from complete
        if buf and self.warning is None:  # not where damage stopped the inflating: it says so
            self.warning = f"{self.path} ends in the middle of a tick; that tick was dropped"

    def _inflated(self) -> Iterator[bytes]:
        """The ticks' gzip stream inflated, in pieces of at most MAX_LINE + 1 bytes (a line
        that inflates to a gigabyte is stopped at its first pieces), member after member (a
        file of several reads as one stream), up to the damage, if any, and up to the summary
        of a finished file (it holds no ticks)."""
        try:
            place = summary_place(self.path)
        except RecordingError:
            place = None  # a damaged footer: read to the end, as a file without one
        left = place[0] if place is not None else None  # bytes up to the summary
        z = zlib.decompressobj(GZIP_WBITS)
        data = b""  # compressed bytes not yet inflated
        while True:
            if not data or (z.eof and len(data) < len(GZIP_MAGIC)):
                more = self._f.read(CHUNK if left is None else min(CHUNK, left))
                if left is not None:
                    left -= len(more)
                if not more and not data:
                    break
                data += more
                if not more and not z.eof:
                    break  # the rest is less than a member's magic
            if z.eof:  # another gzip member: the file reads on as one stream
                if not data.startswith(GZIP_MAGIC):
                    if data.strip(b"\0"):
                        self.warning = f"{self.path} has trailing data after its end; ignored"
                    return
                z = zlib.decompressobj(GZIP_WBITS)
            saved = z.copy()
            try:
                out = z.decompress(data, MAX_LINE + 1)
            except zlib.error:
                yield self._up_to_damage(saved, data)
                return
            data = z.unused_data if z.eof else z.unconsumed_tail
            yield out
        if not z.eof:
            # Still being written, or the writer was killed: the tail is cut at a tick boundary
            # unless a tick was being written, which is then dropped.
            self.warning = (f"{self.path} ends without its end marker (still being written, "
                            "or the writer stopped); read every complete tick")

    def _up_to_damage(self, z: Any, data: bytes) -> bytes:
        """What `data` inflates to before the byte where inflating it fails."""
        out = []
        size = 0
        for i in range(len(data)):
            try:
                piece = z.decompress(data[i:i + 1])
            except zlib.error as e:
                self.warning = inflate_damage(self.path, e)
                break
            out.append(piece)
            size += len(piece)
            if size > MAX_LINE:
                break  # the line is too long anyway
        return b"".join(out)

    def __iter__(self) -> Iterator[Snapshot]:
        return self.decoded(self.states())

    def close(self) -> None:
        self._f.close()

    def states(self) -> Iterator[dict[str, Any]]:
        """Each tick in record form, without building Snapshots (cheap: for skipping ahead)."""
        state: dict[str, Any] | None = None
        n = skipped = 0
        try:
            for raw in self._rest:
                try:
                    rec = parse_line(raw)
                    new = next_state(state, rec)
                except (ValueError, KeyError, TypeError) as e:
                    self.warning = f"{self.path}: tick {n + 1} is damaged ({e}); read up to it"
                    return
                if new is None:  # a line type from a newer minor version: skip it, and say so
                    skipped += not known_line(rec)
                    continue
                state = new
                n += 1
                self.ticks = n
                yield state
        finally:
            self._f.close()
            if skipped:
                self.warning = "; ".join(filter(None, [self.warning, skipped_lines(
                    self.path, skipped)]))

    def decoded(self, states: Iterator[dict[str, Any]]) -> Iterator[Snapshot]:
        decoder = SnapshotDecoder()
        for n, state in enumerate(states, 1):
            try:
                snap = decoder.decode(state)
            except (ValueError, KeyError, TypeError) as e:
                self.warning = f"{self.path}: tick {n} is damaged ({e}); read up to it"
                return
            yield snap


def read_recording(path: str | os.PathLike[str]) -> ReadResult:
    """Every Snapshot of a recording; one written in segments is read whole from its first."""
    return read_series(path)


class SeriesReader:
    """Reads the segments of a recording one after the other, as one recording.

    Given one path, its segments are found with `segment_paths`; given several (a shell glob),
    they are read in segment order. A file that is not a segment of the same run as the first
    ends the series there (with a warning), and a file whose header says it was not written in
    segments is the whole recording. `warning` gathers the segments' warnings."""

    def __init__(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> None:
        if isinstance(paths, (str, os.PathLike)):
            self.paths = segment_paths(paths)
        else:
            self.paths = given_files(paths)
        self._warnings: list[str] = []
        self.ticks = 0
        self._first = RecordingReader(self.paths[0])
        self.header = self._first.header

    @property
    def warning(self) -> str | None:
        return "; ".join(self._warnings) or None

    def __iter__(self) -> Iterator[Snapshot]:
        return self._each(iter)

    def states(self) -> Iterator[dict[str, Any]]:
        """Each tick in record form (see RecordingReader.states)."""
        return self._each(RecordingReader.states)

    def files(self) -> Iterator[RecordingReader]:
        """The series' files in order, each opened with its header read and none of its ticks
        (close each); `warning` then says which were left out and why."""
        return self._segments()

    def _each(self, items: Callable[[RecordingReader], Iterator[Any]]) -> Iterator[Any]:
        for r in self._segments():
            yield from items(r)
            self.ticks += r.ticks
            if r.warning:
                self._warnings.append(r.warning)

    def _segments(self) -> Iterator[RecordingReader]:
        yield self._first
        series, n = self.header.get("series"), self.header.get("segment")
        if series is None or not isinstance(n, int):
            return  # not written in segments: the file is the whole recording
        for path in self.paths[1:]:
            n += 1
            try:
                r = RecordingReader(path)
            except RecordingError as e:  # e.g. created by a writer killed right then: empty
                self._warnings.append(f"{e}; skipped")
                continue
            got, warning = next_segment(r.header, series, n, path, self.paths[0])
            if warning:
                self._warnings.append(warning)
            if got is None:
                r._f.close()
                return
            n = got
            yield r


def read_series(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> ReadResult:
    """Every Snapshot of a recording, across its segments (see SeriesReader)."""
    r = SeriesReader(paths)
    snaps = list(r)
    return ReadResult(r.header, snaps, r.warning)


def given_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The files a user named, in segment order, once they are known to be one run's: files of
    different runs given together (`report b.gputop a.gputop`, `report *.gputop`) are refused,
    never merged or silently dropped. A file whose header cannot be read is left to the reader,
    which says why it skips it."""
    files = sorted((Path(p) for p in paths), key=_segment_order)
    if not files:
        raise RecordingError("no recording given")
    runs: dict[object, Path] = {}
    for path in files if len(files) > 1 else ():
        try:
            r = RecordingReader(path)
        except RecordingError:
            continue
        r.close()
        series, segment = r.header.get("series"), r.header.get("segment")
        runs.setdefault(series if isinstance(series, str) and isinstance(segment, int)
                        else path, path)
    if len(runs) > 1:
        first, second, *more = runs.values()
        others = f" (and {len(more)} more)" if more else ""
        raise RecordingError(f"{first} and {second}{others} are different runs",
                             hint="give one run at a time: its first file, or all its files")
    return files
