"""Reading a recording: one file (RecordingReader), or a run written in segments as one
(SeriesReader). A truncated or damaged tail costs only the ticks after the damage."""

from __future__ import annotations

import json
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
from gputop.recording.format import (
    FORMAT,
    GZIP_MAGIC,
    GZIP_WBITS,
    VERSION,
    SnapshotDecoder,
    apply,
)
from gputop.recording.segments import _segment_order, next_segment, segment_paths

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
            header = json.loads(first)
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            self._f.close()
            raise RecordingError(f"{self.path} is not a gputop recording",
                                 hint="its first line is not a gputop header")
        if not isinstance(header.get("version"), int) or header["version"] > VERSION:
            self._f.close()
            raise RecordingError(
                f"{self.path} is a version {header.get('version')} recording",
                hint=f"this gputop reads versions up to {VERSION}; upgrade gputop")
        self.header = header
        self._rest = lines

    def _lines(self) -> Iterator[bytes]:
        z = zlib.decompressobj(GZIP_WBITS)
        buf = b""
        while True:
            chunk = self._f.read(1 << 16)
            if not chunk:
                break
            saved = z.copy()
            try:
                data = z.decompress(chunk)
            except zlib.error:
                # Decompress again in small steps to keep what precedes the damage.
                z, data = saved, b""
                for i in range(len(chunk)):
                    try:
                        data += z.decompress(chunk[i:i + 1])
                    except zlib.error as e:
                        self.warning = f"{self.path} is damaged ({e}); read up to the damage"
                        break
                chunk = b""
            buf += data
            rest = b""
            while z.eof and chunk:
                # Another gzip member (the summary): the file reads on as one stream.
                rest = z.unused_data
                if len(rest) < len(GZIP_MAGIC):  # the chunk ended at or in the next magic
                    rest += self._f.read(len(GZIP_MAGIC) - len(rest))
                if not rest.startswith(GZIP_MAGIC):
                    break
                z = zlib.decompressobj(GZIP_WBITS)
                try:
                    buf += z.decompress(rest)
                except zlib.error as e:
                    self.warning = f"{self.path} is damaged ({e}); read up to the damage"
                    chunk = b""
            *complete, buf = buf.split(b"\n")
            yield from complete
            if not chunk:
                return
            if z.eof:
                if rest.strip(b"\0"):
                    self.warning = f"{self.path} has trailing data after its end; ignored"
                return
        if not z.eof:
            # Still being written, or the writer was killed: the tail is cut at a tick boundary
            # unless a tick was being written, which is then dropped.
            self.warning = (f"{self.path} ends without its end marker (still being written, "
                            "or the writer stopped); read every complete tick")
        if buf:
            self.warning = f"{self.path} ends in the middle of a tick; that tick was dropped"

    def __iter__(self) -> Iterator[Snapshot]:
        return self.decoded(self.states())

    def close(self) -> None:
        self._f.close()

    def states(self) -> Iterator[dict[str, Any]]:
        """Each tick in record form, without building Snapshots (cheap: for skipping ahead)."""
        state: dict[str, Any] | None = None
        n = 0
        try:
            for raw in self._rest:
                n += 1
                try:
                    rec = json.loads(raw)
                    if "k" in rec:
                        state = rec["k"]
                    elif "d" in rec:
                        if state is None:
                            raise ValueError("a delta before any keyframe")
                        state = apply(state, rec["d"])
                    else:
                        continue  # a line type from a newer minor version: skip it
                    if not isinstance(state, dict):
                        raise ValueError("a tick that is not an object")
                except (ValueError, KeyError, TypeError) as e:
                    self.warning = f"{self.path}: tick {n} is damaged ({e}); read up to it"
                    return
                self.ticks = n
                yield state
        finally:
            self._f.close()

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
            self.paths = sorted((Path(p) for p in paths), key=_segment_order)
            if not self.paths:
                raise RecordingError("no recording given")
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
