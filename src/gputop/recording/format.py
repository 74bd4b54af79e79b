"""The recording format (docs/recording.md): its constants, the record form of a Snapshot, and the
summary footer. A recording is a run's Snapshots on disk, for postmortems, replay and fixtures.

Format (docs/recording.md): one gzip stream of UTF-8 JSON lines. The first line is a header; then
each line is a full snapshot ("k", a keyframe) or a JSON Merge Patch (RFC 7386) against the previous
snapshot ("d"). Lists of devices, processes and links are stored as objects keyed by their ids so
that a patch names only what changed. The deflate stream is flushed after every tick
(Z_SYNC_FLUSH), so a writer killed with SIGKILL loses at most the tick it was writing, and a reader
of a damaged or still-growing file gets every tick up to the damage. A long run can be written as
a series of files of bounded size (segments), each a recording on its own. A finished file ends
with its summary (what `gputop report` needs of it, gputop.report.summary) in gzip members of
their own, the last of a fixed size that says where the summary starts.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gputop.errors import RecordingError
from gputop.model import (
    SCHEMA,
    DeviceSample,
    DictMemo,
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
GZIP_WBITS = 31  # zlib: gzip container
GZIP_MAGIC = b"\x1f\x8b"
SUMMARY = "summary"  # the key of a summary line
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


def to_record(snap: Snapshot, memo: DictMemo | None = None) -> dict[str, Any]:
    # Merge patch uses null for "delete", so the record form has no nulls: a key that is absent
    # decodes to its default, and a missing measurement is in "unavailable".
    d = snap.to_dict(drop_nulls=True, memo=memo)
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
# The summary footer


def footer(at: int, size: int) -> bytes:
    """The last FOOTER_SIZE bytes of a file with a summary: a gzip member (any gzip reader
    inflates it) whose one line says at which byte the summary's gzip member starts and how long
    it is. Its size is fixed, so a reader finds it without reading the rest."""
    line = json.dumps({"summary_at": at, "summary_bytes": size}, separators=(",", ":")).encode()
    line = line.ljust(_FOOTER_LINE - 1) + b"\n"
    head = GZIP_MAGIC + b"\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate; no name, no time
    block = b"\x01" + struct.pack("<HH", len(line), len(line) ^ 0xFFFF)  # last block, stored
    return head + block + line + struct.pack("<II", zlib.crc32(line), len(line))


def summary_place(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(offset, length) of the summary that the file's footer points to; None when the file
    ends without a footer (its ticks then run to its end). Reads only the footer."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < FOOTER_SIZE:
                return None
            f.seek(size - FOOTER_SIZE)
            tail = f.read(FOOTER_SIZE)
    except OSError as e:
        raise RecordingError(f"cannot read {Path(path).name}: {e.strerror or e}") from None
    try:
        footer = json.loads(zlib.decompress(tail, GZIP_WBITS))
        at, length = footer["summary_at"], footer["summary_bytes"]
    except (zlib.error, ValueError, KeyError, TypeError):
        return None
    if (not isinstance(at, int) or not isinstance(length, int) or at <= 0
            or at + length != size - FOOTER_SIZE):
        raise RecordingError(f"{Path(path).name}'s summary footer is damaged")
    return at, length


def read_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The summary a writer appended to a finished file, read from the file's end without
    reading its ticks. RecordingError says why there is none or it cannot be read."""
    name = Path(path).name
    place = summary_place(path)
    if place is None:
        raise RecordingError(f"{name} has no summary (it was cut short, is still being "
                             "written, or was written by an older gputop)")
    try:
        with open(path, "rb") as f:
            f.seek(place[0])
            data = f.read(place[1])
    except OSError as e:
        raise RecordingError(f"cannot read {name}: {e.strerror or e}") from None
    try:
        z = zlib.decompressobj(GZIP_WBITS)
        text = z.decompress(data)
        if not z.eof or z.unused_data:
            raise ValueError("it does not end where its footer says")
        for raw in text.splitlines():
            obj = json.loads(raw)
            if isinstance(obj, dict) and isinstance(obj.get(SUMMARY), dict):
                body: dict[str, Any] = obj[SUMMARY]
                return body
        raise ValueError("no summary line")
    except (zlib.error, ValueError) as e:
        raise RecordingError(f"{name}'s summary is damaged ({e})") from None
