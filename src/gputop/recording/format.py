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
import math
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
    from_dict_over,
    replace,
)
from gputop.recording.checks import FORMAT as FORMAT  # defined with the header check
from gputop.recording.checks import check_tick, parse_line

VERSION = 1
KEYFRAME_EVERY = 300  # ticks; a reader can seek to a keyframe
GZIP_WBITS = 31  # zlib: gzip container
GZIP_MAGIC = b"\x1f\x8b"
SUMMARY = "summary"  # the key of a summary line
MAX_SUMMARY = 32 << 20  # bytes of a summary a reader takes: a day of 8 GPUs is about 2 MB
_FOOTER_LINE = 64  # bytes of the footer's JSON line, padded with spaces
# The footer: a gzip member holding one stored (uncompressed) deflate block of the line.
FOOTER_SIZE = 10 + 5 + _FOOTER_LINE + 8
_KEYED = {
    "devices": ("index",),
    "processes": ("device_index", "pid"),
    "links": ("device_index", "link"),
}
# For a DictMemo (its `like`): what says which item an object is, from one tick to the next.
ITEMS: dict[type, tuple[str, ...]] = {DeviceSample: _KEYED["devices"],
                                      ProcessSample: _KEYED["processes"],
                                      LinkSample: _KEYED["links"], HostSample: ()}


# ----------------------------------------------------------------------------------------------
# Record form: the JSON shape with keyed lists turned into objects; RFC 7386 merge patches.


def _key(item: Mapping[str, Any], parts: tuple[str, ...]) -> str:
    return ":".join([str(item[p]) for p in parts])


def to_record(snap: Snapshot, memo: DictMemo | None = None,
              keys: dict[Any, tuple[Any, Any]] | None = None) -> dict[str, Any]:
    """The record form of a Snapshot. With `memo` (a DictMemo), an object handed again keeps its
    dict; with `keys` (kept by the caller from tick to tick), such a dict keeps its key, and a
    list the memo hands again keeps its object of keyed dicts."""
    # Merge patch uses null for "delete", so the record form has no nulls: a key that is absent
    # decodes to its default, and a missing measurement is in "unavailable".
    d = snap.to_dict(drop_nulls=True, memo=memo)
    if keys is None:
        for name, parts in _KEYED.items():
            d[name] = {_key(x, parts): x for x in d.get(name) or ()}
        return d
    last = dict(keys)
    keys.clear()
    for name, parts in _KEYED.items():
        items = d.get(name) or ()
        was = last.get(name)
        if was is not None and was[0] is items:
            keys[name] = was
            d[name] = was[1]
            continue
        keyed = {}
        for x in items:
            hit = last.get(id(x))
            if hit is None or hit[0] is not x:
                hit = (x, _key(x, parts))
            keys[id(x)] = hit
            keyed[hit[1]] = x
        keys[name] = (items, keyed)
        d[name] = keyed
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
    numbers held still) is decoded once and shared: fewer objects to build and to keep. Given
    the patch that made a tick from the last one decoded, only what it names is looked at, and
    of a part it changes only the keys it changes are decoded again."""

    def __init__(self) -> None:
        # Of each part decoded last: its items by key, each (its record, its object), a part
        # that is one object under ""; and the part as decoded (the tuple of its items' objects
        # in their order, or its object).
        self._prev: dict[str, dict[str, tuple[object, object]]] = {}
        self._last: dict[str, Any] = {}

    def decode(self, d: Mapping[str, Any], patch: Mapping[str, Any] | None = None) -> Snapshot:
        """The Snapshot of tick `d`. `patch`: the merge patch that made `d` from the tick this
        decoder decoded last (None when there is none, or it is not known)."""
        schema = d.get("schema", SCHEMA)
        if not isinstance(schema, str) or not schema.startswith("gputop.snapshot/"):
            raise ValueError(f"not a gputop snapshot (schema {schema!r})")
        rest: dict[str, Any] = {}
        parts: dict[str, Any] = {}
        for name, v in d.items():
            cls = _PARTS.get(name)
            if cls is None:
                rest[name] = v
            elif patch is not None and name not in patch and name in self._last:
                parts[name] = self._last[name]  # the very part decoded last
            elif v is None:
                parts[name] = () if name in _KEYED else None
                self._prev.pop(name, None)
            elif name in _KEYED:
                if not isinstance(v, dict):
                    raise TypeError(f"{name} is a {type(v).__name__}, not an object")
                parts[name] = self._items(name, cls, v, None if patch is None else patch.get(name))
            else:
                prev = self._prev.get(name, {}).get("")
                sub = None if patch is None else patch.get(name)
                obj = (prev[1] if prev is not None and prev[0] is v
                       else _patched(cls, prev[1], v, sub) if prev is not None and sub is not None
                       else from_dict(cls, v))
                self._prev[name] = {"": (v, obj)}
                parts[name] = obj
        for name in self._last.keys() - parts.keys():
            del self._last[name]  # gone from the tick: decoded afresh if it comes back
            self._prev.pop(name, None)
        self._last.update(parts)
        return from_dict(Snapshot, rest, parts)

    def _items(self, name: str, cls: type, v: dict[str, Any],
               patch: Any) -> tuple[object, ...]:
        prev = self._prev.get(name, {})
        last = self._last.get(name)
        if (type(patch) is dict and last is not None and len(prev) == len(last)
                and all(k in prev and type(p) is dict for k, p in patch.items())):
            # Items changed, none added or removed: each keeps its place.
            items = list(last)
            where = {k: i for i, k in enumerate(prev)}
            for key, p in patch.items():
                rec = v[key]
                obj = _patched(cls, prev[key][1], rec, p)
                prev[key] = (rec, obj)
                items[where[key]] = obj
            return tuple(items)
        seen: dict[str, tuple[object, object]] = {}
        for key, rec in v.items():
            old = prev.get(key)
            seen[key] = (rec, old[1] if old is not None and old[0] is rec
                         else from_dict(cls, rec))
        self._prev[name] = seen
        return tuple(obj for _, obj in seen.values())


# The fields of each class whose values the writer may round in the record form
# (writer.round_to_sensor): a tick read back differs from the Snapshot written only in these.
ROUNDED: dict[type, tuple[str, ...]] = {
    HostSample: ("cpu_percent_per_core", "cpu_percent", "iowait_percent"),
    ProcessSample: ("cpu_percent", "children"),
    DeviceSample: ("pcie_rx", "pcie_tx"),
    LinkSample: ("rx", "tx"),
}
_ONE = ("system", "host", "topology")  # the parts of a tick that are one object


class ReadBack:
    """The Snapshots a reader gets back from the ticks a writer writes, made from the Snapshots
    written and their record form as written (rounded), without reading the record form back.

    What a reader decodes of a tick is the Snapshot written but for what the writer rounded,
    and in its order of the keyed lists: a merge patch leaves the items it keeps in their
    places and adds new ones at the end (a process that started is last, wherever the source
    had it). So each object written whose record is new is taken with its rounded fields
    decoded from its record, and each list in a reader's order; an object whose record is last
    tick's very record is last tick's object read back.

    A tick given without its Snapshot is read as a reader reads it: its patch applied to the
    tick before, and decoded (SnapshotDecoder). So is every tick after it up to the next
    keyframe: a writer gives none where its patch left out a value equal to the one before but
    of another kind (1.0 after 1: a reader keeps the 1), and from then on the reader's ticks
    may differ from those written. So is a tick whose keyed lists name an item twice."""

    def __init__(self) -> None:
        # Of each part last read: its record, and the objects read back (keyed parts: by key,
        # in a reader's order, each (its record, its object), and the tuple of the objects).
        self._one: dict[str, tuple[object, object]] = {}
        self._keyed: dict[str, tuple[object, dict[str, tuple[Any, object]], tuple[Any, ...]]]
        self._keyed = {}
        self._last: Mapping[str, Any] | None = None  # the tick last read, in record form
        self._state: dict[str, Any] | None = None  # the reader's tick, once read as a reader
        self._decoder = SnapshotDecoder()

    def read(self, rec: Mapping[str, Any], patch: Mapping[str, Any] | None,
             snap: Snapshot | None = None) -> Snapshot:
        """The Snapshot a reader gets of tick `rec`: a keyframe (`patch` is None), or `patch`
        applied to the tick read before; written from `snap`."""
        if patch is None:
            self._one.clear()
            self._keyed.clear()
            self._state = None
        if (self._state is not None or snap is None or (self._last is None and patch is not None)
                or any(len(rec.get(name) or ()) != len(getattr(snap, name)) for name in _KEYED)):
            return self._decode(rec, patch)
        parts: dict[str, Any] = {}
        for name in _ONE:
            obj, r = getattr(snap, name), rec.get(name)
            hit = self._one.get(name)
            if hit is not None and hit[0] is r:
                parts[name] = hit[1]
                continue
            if r is not None:
                obj = _rounded(obj, r)
            self._one[name] = (r, obj)
            parts[name] = obj
        for name in _KEYED:
            keyed = rec[name]
            last = self._keyed.get(name)
            if last is not None and last[0] is keyed:  # the very items (links between slow ticks)
                parts[name] = last[2]
                continue
            was = last[1] if last is not None else {}
            now: dict[str, tuple[Any, object]] = {}
            for (key, r), obj in zip(keyed.items(), getattr(snap, name)):
                hit = was.get(key)
                now[key] = hit if hit is not None and hit[0] is r else (r, _rounded(obj, r))
            if list(was) != list(now):  # a reader's order: the items kept, then the new ones
                ordered = {key: now[key] for key in was if key in now}
                ordered.update(now)
                now = ordered
            self._keyed[name] = (keyed, now, tuple([obj for _, obj in now.values()]))
            parts[name] = self._keyed[name][2]
        self._last = rec
        return replace(snap, **parts)

    def _decode(self, rec: Mapping[str, Any], patch: Mapping[str, Any] | None) -> Snapshot:
        """Tick `rec` read as a reader reads it."""
        if patch is None or (self._state is None and self._last is None):
            state, patch = dict(rec), None
        elif self._state is not None:
            state = apply(self._state, patch)
        else:  # the tick before was read from its Snapshot: a reader's is its record
            before = dict(self._last)  # type: ignore[arg-type]
            for name, (_, items, _) in self._keyed.items():
                before[name] = {key: r for key, (r, _) in items.items()}
            state, patch = apply(before, patch), None
        self._state = state
        self._last = rec
        return self._decoder.decode(state, patch)


def _rounded(obj: Any, rec: Mapping[str, Any]) -> Any:
    """`obj` with the fields the writer may have rounded decoded from its record `rec`."""
    fields = ROUNDED.get(type(obj))
    if not fields:
        return obj
    changed = {f: rec[f] for f in fields if f in rec}
    return from_dict_over(obj, changed) if changed else obj


def _patched(cls: type, old: Any, rec: Mapping[str, Any], patch: Any) -> Any:
    """from_dict(cls, rec) where `rec` is the record `old` was decoded from with the merge patch
    `patch` applied: the keys it names are decoded again, the other fields are old's."""
    unavailable = rec.get("unavailable")
    if type(patch) is not dict or "unavailable" in patch:
        return from_dict(cls, rec)
    changed = {}
    for k in patch:
        if k not in rec or (unavailable and k in unavailable):
            return from_dict(cls, rec)  # back to a default, or hidden by its reason
        changed[k] = rec[k]
    return from_dict_over(old, changed)


def diff(old: Mapping[str, Any], new: Mapping[str, Any],
         since: Mapping[int, tuple[Mapping[str, Any], list[str]]] | None = None,
         unlike: list[str] | None = None) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns `old` into `new`. With `since` (DictMemo.since), a
    dict made from `old` by putting some keys is compared on those keys only. Equal values are
    not patched, whatever their kinds: 1 and 1.0, 1 and true, 0.0 and -0.0 (a reader keeps the
    old one); with `unlike`, the keys of such values are added to it."""
    patch: dict[str, Any] = {}
    hint = since.get(id(new)) if since else None
    if hint is not None and hint[0] is old:
        for k in hint[1]:
            v, ov = new[k], old[k]
            if ov is v:
                continue
            if ov != v:
                patch[k] = (diff(ov, v, since, unlike)
                            if isinstance(ov, dict) and isinstance(v, dict) else v)
            elif unlike is not None and not same_json(ov, v):
                unlike.append(k)
        return patch
    kept = 0  # keys of `new` that `old` has
    for k, v in new.items():
        ov = old.get(k, _ABSENT)
        if ov is v:  # a dict handed again is the same
            kept += 1
        elif ov is _ABSENT:
            patch[k] = v
        else:
            kept += 1
            if ov != v:
                patch[k] = (diff(ov, v, since, unlike)
                            if isinstance(ov, dict) and isinstance(v, dict) else v)
            elif unlike is not None and not same_json(ov, v):
                unlike.append(k)
    if kept != len(old):
        for k in old:
            if k not in new:
                patch[k] = None
    return patch


_ABSENT = object()


def same_json(a: Any, b: Any) -> bool:
    """Whether two equal values (a == b) are also written alike: 1 and 1.0, 1 and True, 0.0 and
    -0.0 are equal but are not."""
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        return a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b)
    if t is list:
        return all(map(same_json, a, b))
    if t is dict:
        return list(a) == list(b) and all(same_json(x, b[k]) for k, x in a.items())
    return True


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
    """The footer of a file whose summary's gzip member starts at byte `at` and has `size`."""
    return footer_of({"summary_at": at, "summary_bytes": size})


def footer_of(obj: Mapping[str, Any]) -> bytes:
    """The last FOOTER_SIZE bytes of a finished file: a gzip member (any gzip reader inflates
    it) whose one line says at which byte the summary's gzip member starts and how long it is,
    or why the file has none. Its size is fixed, so a reader finds it without reading the
    rest."""
    line = json.dumps(obj, separators=(",", ":")).encode()
    line = line.ljust(_FOOTER_LINE - 1) + b"\n"
    head = GZIP_MAGIC + b"\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate; no name, no time
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
        footer = json.loads(zlib.decompress(tail, GZIP_WBITS))
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
        z = zlib.decompressobj(GZIP_WBITS)
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
# Reading a line, a tick


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
    ValueError says why the tick is damaged (checks.check_tick)."""
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
