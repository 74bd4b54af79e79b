"""Recordings: a run's Snapshots on disk, for postmortems, replay and test fixtures.

Format (docs/recording.md): one gzip stream of UTF-8 JSON lines. The first line is a header; then
each line is a full snapshot ("k", a keyframe) or a JSON Merge Patch (RFC 7386) against the previous
snapshot ("d"). Lists of devices, processes and links are stored as objects keyed by their ids so
that a patch names only what changed. The deflate stream is flushed after every tick
(Z_SYNC_FLUSH), so a writer killed with SIGKILL loses at most the tick it was writing, and a reader
of a damaged or still-growing file gets every tick up to the damage. A long run can be written as
a series of files of bounded size (segments), each a recording on its own. A finished file ends
with its summary (what `gputop report` needs of it, gputop.diagnose.summary) in gzip members of
their own, the last of a fixed size that says where the summary starts.
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gputop import __version__
from gputop.errors import RecordingError
from gputop.model import (
    SCHEMA,
    DeviceSample,
    HostSample,
    LinkSample,
    ProcessSample,
    Snapshot,
    SystemInfo,
    Topology,
    from_dict,
)
from gputop.recording_checks import (
    FORMAT,
    MAX_LINE,
    check_header,
    check_input,
    check_tick,
    parse_line,
)

VERSION = 1
KEYFRAME_EVERY = 300  # ticks; a reader can seek to a keyframe
COMPRESSION_LEVEL = 9  # zlib's best: 8 % smaller than 6 for ~1 ms more a tick with 8 GPUs
_GZIP_END = 16  # bytes that finishing a stream adds at most: an empty last block, the trailer
_GZIP_WBITS = 31  # zlib: gzip container
_GZIP_MAGIC = b"\x1f\x8b"
SUMMARY = "summary"  # the key of a summary line
CHUNK = 1 << 16  # compressed bytes read at a time
MAX_SUMMARY = 32 << 20  # bytes of a summary a reader takes: a day of 8 GPUs is about 2 MB
_FOOTER_LINE = 64  # bytes of the footer's JSON line, padded with spaces
# The footer: a gzip member holding one stored (uncompressed) deflate block of the line.
FOOTER_SIZE = 10 + 5 + _FOOTER_LINE + 8
_KEYED = {
    "devices": ("index",),
    "processes": ("device_index", "pid"),
    "links": ("device_index", "link"),
}


# ----------------------------------------------------------------------------------------------
# Record form: the JSON shape with keyed lists turned into objects; RFC 7386 merge patches.


def _key(item: Mapping[str, Any], parts: tuple[str, ...]) -> str:
    return ":".join(str(item[p]) for p in parts)


def to_record(snap: Snapshot) -> dict[str, Any]:
    # Merge patch uses null for "delete", so the record form has no nulls: a key that is absent
    # decodes to its default, and a missing measurement is in "unavailable".
    d = snap.to_dict(drop_nulls=True)
    for name, parts in _KEYED.items():
        d[name] = {_key(x, parts): x for x in d.get(name) or ()}
    return d


def from_record(d: Mapping[str, Any]) -> Snapshot:
    return SnapshotDecoder().decode(d)


_PARTS: dict[str, type] = {"system": SystemInfo, "host": HostSample, "topology": Topology,
                           "devices": DeviceSample, "processes": ProcessSample,
                           "links": LinkSample}


class SnapshotDecoder:
    """Turns consecutive ticks in record form into Snapshots, reusing what did not change.

    A merge patch copies only the objects it changes, so a part of this tick's record that is the
    very object it was last tick (the system facts, the topology, an idle link, a process whose
    numbers held still) is decoded once and shared: fewer objects to build and to keep."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str], tuple[object, object]] = {}

    def decode(self, d: Mapping[str, Any]) -> Snapshot:
        schema = d.get("schema", SCHEMA)
        if not isinstance(schema, str) or not schema.startswith("gputop.snapshot/"):
            raise ValueError(f"not a gputop snapshot (schema {schema!r})")
        prev, seen = self._prev, {}
        rest: dict[str, Any] = {}
        parts: dict[str, Any] = {}
        for name, v in d.items():
            cls = _PARTS.get(name)
            if cls is None:
                rest[name] = v
            elif v is None:
                parts[name] = () if name in _KEYED else None
            elif name in _KEYED:
                if not isinstance(v, dict):
                    raise TypeError(f"{name} is a {type(v).__name__}, not an object")
                items = []
                for key, rec in v.items():
                    tag = (name, key)
                    old = prev.get(tag)
                    obj = old[1] if old is not None and old[0] is rec else from_dict(cls, rec)
                    seen[tag] = (rec, obj)
                    items.append(obj)
                parts[name] = tuple(items)
            else:
                old = prev.get((name, ""))
                obj = old[1] if old is not None and old[0] is v else from_dict(cls, v)
                seen[(name, "")] = (v, obj)
                parts[name] = obj
        self._prev = seen
        return from_dict(Snapshot, rest, parts)


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns `old` into `new`."""
    patch: dict[str, Any] = {}
    for k, v in new.items():
        if k not in old:
            patch[k] = v
        elif old[k] != v:
            ov = old[k]
            patch[k] = diff(ov, v) if isinstance(ov, dict) and isinstance(v, dict) else v
    for k in old:
        if k not in new:
            patch[k] = None
    return patch


def apply(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch(target, patch)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            out[k] = apply(out.get(k), v)
        else:
            out[k] = v  # what apply() would return, without the call: most keys of a tick
    return out


# ----------------------------------------------------------------------------------------------
# Writing


def round_to_sensor(rec: dict[str, Any]) -> None:
    """Drops the digits no sensor measured from a tick in record form (docs/recording.md).

    CPU % per core and per process is counted in clock ticks (1 % of a core a second) and is
    kept whole; the node's total CPU % to 0.1; throughputs in bytes/s (PCIe, NVLink) to 3
    significant digits. The digits dropped are noise, which costs bytes that no compression
    wins back."""
    host = rec.get("host")
    if host:
        cores = host.get("cpu_percent_per_core")
        if cores:
            host["cpu_percent_per_core"] = [_whole(c) for c in cores]
        for k in ("cpu_percent", "iowait_percent"):
            if _is_number(v := host.get(k)):
                host[k] = round(v, 1)
    for p in (rec.get("processes") or {}).values():
        if _is_number(v := p.get("cpu_percent")):
            p["cpu_percent"] = _whole(v)
        for c in p.get("children") or ():
            if _is_number(v := c.get("cpu_percent")):
                c["cpu_percent"] = _whole(v)
    for d in (rec.get("devices") or {}).values():
        for k in ("pcie_rx", "pcie_tx"):
            if _is_number(v := d.get(k)):
                d[k] = _significant(v)
    for lk in (rec.get("links") or {}).values():
        for k in ("rx", "tx"):
            if _is_number(v := lk.get(k)):
                lk[k] = _significant(v)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _whole(v: Any) -> Any:
    return float(round(v)) if _is_number(v) and math.isfinite(v) else v


def _significant(v: float) -> float:
    return float(f"{v:.3g}")


def _line(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class RecordingWriter:
    """Appends Snapshots to a recording. Every `write` reaches the OS before it returns.

    With `max_bytes` the recording is a series of files, its segments: `path`, then `path.1`,
    `path.2`, ... When the next tick would take the current segment past `max_bytes`, the segment
    is finished (a complete recording on its own) and the tick opens the next one with a header
    and a keyframe, so every segment reads on its own. With `keep`, only the newest `keep`
    segments stay on disk: starting a segment deletes the oldest beyond them.

    With `summary` (the default) each file it finishes ends with its summary for `gputop
    report` (docs/recording.md); a segment too small to hold one goes without."""

    def __init__(self, path: str | os.PathLike[str], *, meta: Mapping[str, Any] | None = None,
                 fsync: bool = False, keyframe_every: int = KEYFRAME_EVERY,
                 max_bytes: int | None = None, keep: int | None = None,
                 summary: bool = True) -> None:
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
        self._since_keyframe = 0
        self._broken = False
        self._deleted = 0  # segments deleted to honour `keep`
        self._series = os.urandom(8).hex() if max_bytes is not None else None
        self._summary: Any = None  # gputop.diagnose.summary.SummaryKeeper
        if summary:
            from gputop.diagnose.summary import SummaryKeeper  # diagnose reads recordings

            self._summary = SummaryKeeper()
        self._summary_room = 0  # bytes kept free in a segment for its summary
        self._no_summary: str | None = None  # why the file being written goes without one
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
        rec = to_record(snap)
        round_to_sensor(rec)
        keyframe = self._prev is None or self._since_keyframe >= self._keyframe_every
        patch = None if keyframe else diff(self._prev or {}, rec)
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
            self._summarize(rec, patch, keyframe)

    def _summarize(self, rec: dict[str, Any], patch: dict[str, Any] | None,
                   keyframe: bool) -> None:
        try:
            self._summary.add(rec, patch)
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
            self._summary = None
            self._summary_room = FOOTER_SIZE
            self._no_summary = "error"

    def _summary_member(self) -> bytes:
        z = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
        segment = len(self.segments) - 1 + self._deleted if self._series is not None else None
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
        self._z = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
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
            self._summary.next_file()
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
                    data = member + _footer(at, len(member))
        if why is not None:
            if self._max_bytes is not None and at + FOOTER_SIZE > self._max_bytes:
                return
            data = _footer_of({"no_summary": why})
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


def _footer(at: int, size: int) -> bytes:
    """The footer of a file whose summary's gzip member starts at byte `at` and has `size`."""
    return _footer_of({"summary_at": at, "summary_bytes": size})


def _footer_of(obj: Mapping[str, Any]) -> bytes:
    """The last FOOTER_SIZE bytes of a finished file: a gzip member (any gzip reader inflates
    it) whose one line says at which byte the summary's gzip member starts and how long it is,
    or why the file has none. Its size is fixed, so a reader finds it without reading the
    rest."""
    line = json.dumps(obj, separators=(",", ":")).encode()
    line = line.ljust(_FOOTER_LINE - 1) + b"\n"
    head = _GZIP_MAGIC + b"\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate; no name, no time
    block = b"\x01" + struct.pack("<HH", len(line), len(line) ^ 0xFFFF)  # last block, stored
    return head + block + line + struct.pack("<II", zlib.crc32(line), len(line))


class SummaryDamaged(RecordingError):
    """A file's summary, or the footer pointing to it, was damaged after it was written."""


# Why a finished file has no summary, as its footer says it (`{"no_summary": CODE}`).
NO_SUMMARY = {
    "size": "it would have taken more than a quarter of the --record-max-size it was "
            "written with",
    "error": "working it out failed as the file was written",
}


def _read_footer(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, int]:
    """The footer's object (None when the file ends without one) and the file's size."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < FOOTER_SIZE:
                return None, size
            f.seek(size - FOOTER_SIZE)
            tail = f.read(FOOTER_SIZE)
    except OSError as e:
        raise RecordingError(f"cannot read {Path(path).name}: {e.strerror or e}") from None
    try:
        footer = json.loads(zlib.decompress(tail, _GZIP_WBITS))
    except (zlib.error, ValueError):
        return None, size
    return (footer if isinstance(footer, dict) else None), size


def summary_place(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(offset, length) of the summary that the file's footer points to; None when the file
    ends without a footer (its ticks then run to its end) or its footer says why it has no
    summary. Reads only the footer."""
    footer, size = _read_footer(path)
    if footer is None or "summary_at" not in footer:
        return None
    at, length = footer.get("summary_at"), footer.get("summary_bytes")
    if (type(at) is not int or type(length) is not int or at <= 0
            or at + length != size - FOOTER_SIZE):
        raise SummaryDamaged(f"{Path(path).name}'s summary footer is damaged")
    return at, length


def read_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The summary a writer appended to a finished file, read from the file's end without
    reading its ticks. RecordingError says why there is none or it cannot be read. A summary
    larger than MAX_SUMMARY bytes is not read (its file is read tick by tick)."""
    name = Path(path).name
    footer, _ = _read_footer(path)
    why = footer.get("no_summary") if footer is not None else None
    if why is not None:
        raise RecordingError(f"{name} has no summary: "
                             f"{NO_SUMMARY.get(str(why), 'its writer left it out')}")
    place = summary_place(path)
    if place is None:
        raise RecordingError(f"{name} has no summary (it was cut short, is still being "
                             "written, or was written by an older gputop)")
    if place[1] > MAX_SUMMARY:
        raise RecordingError(f"{name}'s summary is larger than {MAX_SUMMARY >> 20} MiB")
    try:
        with open(path, "rb") as f:
            f.seek(place[0])
            data = f.read(place[1])
    except OSError as e:
        raise RecordingError(f"cannot read {name}: {e.strerror or e}") from None
    try:
        z = zlib.decompressobj(_GZIP_WBITS)
        text = z.decompress(data, MAX_SUMMARY + 1)
        if len(text) > MAX_SUMMARY:
            raise RecordingError(f"{name}'s summary is larger than {MAX_SUMMARY >> 20} MiB")
        if not z.eof or z.unused_data:
            raise ValueError("it does not end where its footer says")
        for raw in text.splitlines():
            obj = parse_line(raw)
            if isinstance(obj, dict) and isinstance(obj.get(SUMMARY), dict):
                body: dict[str, Any] = obj[SUMMARY]
                return body
        raise ValueError("no summary line")
    except (zlib.error, ValueError) as e:
        raise SummaryDamaged(f"{name}'s summary is damaged ({e})") from None


def ticks_match(path: str | os.PathLike[str], covers: Any) -> bool:
    """Whether the bytes before a file's summary are those its writer summarized: the summary
    says how many there were and their CRC-32 (`covers`). A bit flipped in the ticks after
    the file was finished makes them differ. Reads the file's ticks without inflating them
    (about 0.3 ms a MB)."""
    if not isinstance(covers, dict):
        return False
    want, crc = covers.get("bytes"), covers.get("crc32")
    if type(want) is not int or type(crc) is not int:
        return False
    got = running = 0
    try:
        with open(path, "rb") as f:
            while got < want:
                chunk = f.read(min(1 << 20, want - got))
                if not chunk:
                    return False
                got += len(chunk)
                running = zlib.crc32(chunk, running)
    except OSError as e:
        raise RecordingError(f"cannot read {Path(path).name}: {e.strerror or e}") from None
    return running == crc


# ----------------------------------------------------------------------------------------------
# Reading


@dataclass
class ReadResult:
    header: dict[str, Any]
    snapshots: list[Snapshot]
    warning: str | None = None


def known_line(rec: Any) -> bool:
    """Whether a line that is not a tick is one this version writes (a summary, a footer)."""
    return isinstance(rec, dict) and bool({SUMMARY, "summary_at", "no_summary"} & rec.keys())


def skipped_lines(path: Path, n: int) -> str:
    return (f"{path}: {n} line{'s' if n > 1 else ''} of a kind this gputop does not read "
            "(a newer gputop's, or damage) skipped")


def inflate_damage(path: Path, e: zlib.error) -> str:
    """The warning for a gzip stream that cannot be inflated past some point. A checksum that
    fails at its end means bytes were changed after they were written, somewhere in what was
    read: the ticks read are not to be trusted, which "read up to the damage" would not say."""
    if "incorrect data check" in str(e) or "incorrect length check" in str(e):
        return (f"{path} fails its gzip checksum: bytes in it changed after they were written, "
                "so the ticks read from it may be wrong")
    return f"{path} is damaged ({e}); read up to the damage"


def next_state(state: dict[str, Any] | None, rec: Any) -> dict[str, Any] | None:
    """The tick a line makes after tick `state` (None before the first): a keyframe's, or
    `state` patched; None for a line that is not a tick (a later minor version's, a summary).
    ValueError says why the tick is damaged (recording_checks.check_tick)."""
    if not isinstance(rec, dict):
        raise ValueError("a line that is not an object")
    if "k" in rec:
        new, patch = rec["k"], None
    elif "d" in rec:
        patch = rec["d"]
        if state is None:
            raise ValueError("a delta before any keyframe")
        if not isinstance(patch, dict):
            raise ValueError("a delta that is not an object")
        try:
            new = apply(state, patch)
        except RecursionError:
            raise ValueError("nested too deeply") from None
    else:
        return None
    check_tick(new, patch)
    return new  # type: ignore[no-any-return]


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
        if buf:
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
        z = zlib.decompressobj(_GZIP_WBITS)
        data = b""  # compressed bytes not yet inflated
        while True:
            if not data or (z.eof and len(data) < len(_GZIP_MAGIC)):
                more = self._f.read(CHUNK if left is None else min(CHUNK, left))
                if left is not None:
                    left -= len(more)
                if not more and not data:
                    break
                data += more
                if not more and not z.eof:
                    break  # the rest is less than a member's magic
            if z.eof:  # another gzip member: the file reads on as one stream
                if not data.startswith(_GZIP_MAGIC):
                    if data.strip(b"\0"):
                        self.warning = f"{self.path} has trailing data after its end; ignored"
                    return
                z = zlib.decompressobj(_GZIP_WBITS)
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


# ----------------------------------------------------------------------------------------------
# A recording written in segments (RecordingWriter's max_bytes)


_SEGMENT = re.compile(r"(.*)\.([0-9]+)")  # run.gputop.12


def segment_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a recording written in segments, oldest first: `path` (unless `keep` has
    deleted it), then `path.1`, `path.2`, ... that exist. `[path]` when there are no others."""
    p = Path(path)
    numbered = []
    try:
        for q in p.parent.iterdir():
            m = _SEGMENT.fullmatch(q.name)
            if m and m[1] == p.name:
                numbered.append((int(m[2]), q))
    except OSError:
        pass
    found = ([p] if p.exists() else []) + [q for _, q in sorted(numbered)]
    return found or [p]


def _segment_order(p: Path) -> tuple[str, str, int]:
    m = _SEGMENT.fullmatch(p.name)
    return (str(p.parent), m[1], int(m[2])) if m else (str(p.parent), p.name, 0)


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


def next_segment(header: Mapping[str, Any], series: str, n: int, path: str | os.PathLike[str],
                 first: str | os.PathLike[str]) -> tuple[int | None, str | None]:
    """Whether the file at `path`, with this header, goes on the run of `series` whose next
    segment is `n`: (its segment number, or None if it is not part of the run; a warning)."""
    got = header.get("segment")
    if header.get("series") != series or not isinstance(got, int) or got < n:
        return None, f"{path} is not the next segment of {first}; read up to it"
    if got > n:
        which = f"segment {n} is" if got == n + 1 else f"segments {n}-{got - 1} are"
        return got, f"{which} missing before {path}"
    return got, None


def read_series(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> ReadResult:
    """Every Snapshot of a recording, across its segments (see SeriesReader)."""
    r = SeriesReader(paths)
    snaps = list(r)
    return ReadResult(r.header, snaps, r.warning)
