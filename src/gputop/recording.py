"""Recordings: a run's Snapshots on disk, for postmortems, replay and test fixtures.

Format (docs/recording.md): one gzip stream of UTF-8 JSON lines. The first line is a header; then
each line is a full snapshot ("k", a keyframe) or a JSON Merge Patch (RFC 7386) against the previous
snapshot ("d"). Lists of devices, processes and links are stored as objects keyed by their ids so
that a patch names only what changed. The deflate stream is flushed after every tick
(Z_SYNC_FLUSH), so a writer killed with SIGKILL loses at most the tick it was writing, and a reader
of a damaged or still-growing file gets every tick up to the damage.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator, Mapping
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

FORMAT = "gputop-recording"
VERSION = 1
KEYFRAME_EVERY = 300  # ticks; a reader can seek to a keyframe
_GZIP_WBITS = 31  # zlib: gzip container
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
        else:
            out[k] = apply(out.get(k), v)
    return out


# ----------------------------------------------------------------------------------------------
# Writing


class RecordingWriter:
    """Appends Snapshots to a recording. Every `write` reaches the OS before it returns."""

    def __init__(self, path: str | os.PathLike[str], *, meta: Mapping[str, Any] | None = None,
                 fsync: bool = False, keyframe_every: int = KEYFRAME_EVERY) -> None:
        self.path = Path(path)
        self.ticks = 0
        self.bytes_written = 0
        self._fsync = fsync
        self._keyframe_every = keyframe_every
        self._prev: dict[str, Any] | None = None
        self._broken = False
        self._z = zlib.compressobj(6, zlib.DEFLATED, _GZIP_WBITS)
        try:
            self._f: IO[bytes] = open(self.path, "xb")  # noqa: SIM115 - closed in close()
        except FileExistsError:
            raise RecordingError(f"{self.path} already exists",
                                 hint="choose another file name or remove it first") from None
        except OSError as e:
            raise RecordingError(f"cannot create {self.path}: {e.strerror or e}") from None
        header = {"type": "header", "format": FORMAT, "version": VERSION,
                  "gputop": __version__, "meta": dict(meta or {})}
        self._emit(header)

    def write(self, snap: Snapshot) -> None:
        if self._broken:
            raise RecordingError(f"{self.path}: recording stopped after a write error")
        rec = to_record(snap)
        if self._prev is None or self.ticks % self._keyframe_every == 0:
            self._emit({"k": rec})
        else:
            self._emit({"d": diff(self._prev, rec)})
        self._prev = rec
        self.ticks += 1

    def _emit(self, obj: Mapping[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        chunk = self._z.compress(line) + self._z.flush(zlib.Z_SYNC_FLUSH)
        try:
            self._f.write(chunk)
            self._f.flush()
            if self._fsync:
                os.fsync(self._f.fileno())
        except OSError as e:
            # The compressor has taken a tick the file lacks: finishing the stream now would
            # write a checksum over it. Stop here; the file stays readable up to its last tick.
            self._broken = True
            raise RecordingError(
                f"cannot write {self.path}: {e.strerror or e}",
                hint=f"the {self.ticks} ticks written before are kept",
            ) from None
        self.bytes_written += len(chunk)

    def close(self) -> None:
        if self._f.closed:
            return
        try:
            if not self._broken:
                self._f.write(self._z.flush(zlib.Z_FINISH))
        except OSError:
            pass
        finally:
            self._f.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        z = zlib.decompressobj(_GZIP_WBITS)
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
            *complete, buf = buf.split(b"\n")
            yield from complete
            if not chunk:
                return
            if z.eof:
                if z.unused_data.strip(b"\0"):
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
    r = RecordingReader(path)
    snaps = list(r)
    return ReadResult(r.header, snaps, r.warning)
