"""What a reader checks of a recording before it trusts it (docs/recording.md, "Reading safely").

A recording is input from anywhere: a disk that flipped a bit, a tool that wrote it by hand, a
file someone planted. Every reader (report, export, replay, the demo) takes its ticks through
these checks at its edge, whatever the format version, so that nothing past them meets a value
of the wrong kind: a damaged tick ends the readable part of a file, said in a warning, and never
a traceback.

- the input is a regular file (a FIFO would block every reader forever, a pipe cannot seek);
- the header names the format and a whole version number gputop reads;
- no line is longer than MAX_LINE bytes (one line of a small file can inflate to gigabytes);
- a tick parses (JSON nested too deeply is damage), and each of its parts has the kinds the
  Snapshot's fields have (`check_tick`): a time that is a finite number, an index and a pid that
  are whole numbers, objects where objects belong.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gputop.errors import RecordingError
from gputop.model import (
    REASONS,
    DeviceSample,
    HostSample,
    LinkSample,
    Missing,
    ProcessSample,
    Snapshot,
    SystemInfo,
    Topology,
)

MAX_LINE = 16 << 20  # bytes: a keyframe of 64 GPUs with 2,000 processes is about 2 MB
FORMAT = "gputop-recording"

Check = Callable[[Any], str | None]  # the problem with a value, or None


# -- the input ---------------------------------------------------------------------------------


def check_input(path: str | os.PathLike[str]) -> None:
    """Refuses, in one line, what is not a regular file, before opening it: opening a FIFO
    blocks until a writer comes, and a pipe cannot be read from its end (the summary) or at a
    tick (replay)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise RecordingError(f"{p}: no such file") from None
    except OSError as e:
        raise RecordingError(f"cannot open {p}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise RecordingError(f"{p}: is a directory, not a recording")
    if not stat.S_ISREG(st.st_mode):
        kind = "a pipe" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise RecordingError(f"{p} is {kind}",
                             hint="gputop reads a recording from a file; save it first "
                                  "(cat > run.gputop)")


# -- the header --------------------------------------------------------------------------------


def check_header(path: str | os.PathLike[str], line: bytes, supported: int) -> dict[str, Any]:
    """The header of the recording at `path`, from its first line; RecordingError says why
    it is not one gputop reads (another format, a version that is not a whole number >= 1,
    or newer than `supported`)."""
    try:
        header = parse_line(line)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordingError(f"{path} is not a gputop recording",
                             hint="its first line is not a gputop header")
    version = header.get("version")
    if type(version) is not int or version < 1:
        raise RecordingError(f"{path} has a damaged header",
                             hint=f"its version is {json.dumps(version)[:40]}, not a whole "
                                  "number from 1")
    if version > supported:
        raise RecordingError(f"{path} is a version {version} recording",
                             hint=f"this gputop reads versions up to {supported}; upgrade "
                                  "gputop")
    return header


# -- a line, a tick ----------------------------------------------------------------------------


def parse_line(raw: bytes | str) -> Any:
    """A line's JSON; ValueError for a line too long or nested too deep to be gputop's."""
    if len(raw) > MAX_LINE:
        raise ValueError(f"a line of {len(raw) >> 20} MiB, longer than {MAX_LINE >> 20} MiB")
    try:
        obj = json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return obj


_KEYED = {"devices": DeviceSample, "processes": ProcessSample, "links": LinkSample}
_IDENTITY = {  # fields a reader keys, sorts or indexes by: whole numbers
    DeviceSample: ("index",), ProcessSample: ("pid", "device_index"),
    LinkSample: ("device_index", "link"),
}


def check_tick(state: Any, patch: Mapping[str, Any] | None = None) -> None:
    """Raises ValueError naming the first part of a tick (in record form) of the wrong kind.

    With `patch` (the merge patch that made `state` from a tick already checked) only what it
    touched is checked: a tick costs what changed in it, not the whole node."""
    if not isinstance(state, dict):
        raise ValueError("a tick that is not an object")
    t = state.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise ValueError(f"its time is {_show(t)}, not a finite number")
    names = state.keys() if patch is None else patch.keys()
    for name in names:
        if name == "time" or name not in state:
            continue
        v = state[name]
        cls = _KEYED.get(name)
        if cls is not None:
            if not isinstance(v, dict):
                raise ValueError(f"{name} is {_show(v)}, not an object")
            shape = _shape(cls)
            edits = patch.get(name) if patch is not None else None
            for key in (v.keys() if not isinstance(edits, dict) else edits.keys()):
                item = v.get(key)
                if item is None:
                    continue
                edit = edits.get(key) if isinstance(edits, dict) else None
                problem = shape.check(item, edit.keys() if isinstance(edit, dict) else None)
                if problem is not None:
                    raise ValueError(f"{name} {key}: {problem}")
        elif (field := _SNAPSHOT.get(name)) is not None and (problem := field(v)) is not None:
            raise ValueError(f"{name}: {problem}")


def _show(v: Any) -> str:
    text = json.dumps(v, allow_nan=True) if not isinstance(v, (dict, list)) else \
        ("an object" if isinstance(v, dict) else "a list")
    return text if len(text) <= 24 else text[:23] + "…"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# -- checks made from the Snapshot's own field types ----------------------------------------------


def _missing(v: Any) -> str | None:
    if not isinstance(v, dict):
        return f"{_show(v)}, not an object"
    if v.get("reason") not in REASONS:
        return f"a reason of {_show(v.get('reason'))}"
    since = v.get("since")
    if since is not None and not _is_number(since):
        return f"a since of {_show(since)}"
    if not isinstance(v.get("detail", ""), str):
        return "a detail that is not text"
    return None


def _kind(hint: Any, strict_int: bool = False) -> Check:
    """A check for a JSON value of a field typed `hint` (record form: a value that is missing
    is null or left out, and said in `unavailable`)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if Missing in args and len(args) == 2 and type(None) in args:
            return lambda v: None if v is None else _missing(v)  # `lost`
        checks = [_kind(a, strict_int) for a in args if a not in (Missing, type(None))]
        if len(checks) == 1:
            one = checks[0]
            return lambda v: None if v is None else one(v)
        return lambda v: None if v is None or any(c(v) is None for c in checks) else \
            f"{_show(v)}"
    if origin is tuple:
        args = typing.get_args(hint)
        item = _kind(args[0]) if args else (lambda v: None)

        def listed(v: Any) -> str | None:
            if not isinstance(v, list):
                return f"{_show(v)}, not a list"
            for x in v:
                if (problem := item(x)) is not None:
                    return f"an item {problem}"
            return None

        return listed
    if origin is Mapping or hint is Mapping:
        args = typing.get_args(hint)
        value = _kind(args[1]) if len(args) == 2 else (lambda v: None)

        def mapped(v: Any) -> str | None:
            if not isinstance(v, dict):
                return f"{_show(v)}, not an object"
            for x in v.values():
                if (problem := value(x)) is not None:
                    return f"a value {problem}"
            return None

        return mapped
    if dataclasses.is_dataclass(hint):
        return _object(hint)  # type: ignore[arg-type]
    if hint is float:
        return lambda v: None if _is_number(v) else f"{_show(v)}, not a number"
    if hint is int:
        if strict_int:
            return lambda v: None if type(v) is int else f"{_show(v)}, not a whole number"
        return lambda v: None if _is_number(v) else f"{_show(v)}, not a number"
    if hint is str:
        return lambda v: None if isinstance(v, str) else f"{_show(v)}, not text"
    if hint is bool:
        return lambda v: None if isinstance(v, bool) else f"{_show(v)}, not true or false"
    return lambda v: None  # Any


class _Shape:
    """The kinds of a Snapshot part's fields, from the dataclass's own type hints."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        strict = _IDENTITY.get(cls, ())
        fields = dataclasses.fields(cls)
        self.fields = {f.name: _kind(hints[f.name], f.name in strict) for f in fields}
        self.required = tuple(f.name for f in fields if f.default is dataclasses.MISSING
                              and f.default_factory is dataclasses.MISSING)
        self.finite = {"time", "ts"} & self.fields.keys()  # times a reader sorts and prints
        self.numbers = frozenset(  # fields any number will do for
            f.name for f in fields if f.name not in strict and f.name not in self.finite
            and _number_hint(hints[f.name]))

    def check(self, v: Any, only: Any = None) -> str | None:
        """The problem with object `v`, looking only at the fields named in `only` (those a
        patch changed) when given."""
        if not isinstance(v, dict):
            return f"{_show(v)}, not an object"
        for name in self.required:
            if name not in v:
                return f"no {name}"
        numbers, fields = self.numbers, self.fields
        for name in (v.keys() if only is None else only):
            if name not in v:
                continue  # a patch took it out: it is back to its default (required: above)
            x = v[name]
            if name in numbers and (type(x) is float or type(x) is int):
                continue  # most of a tick, checked without a call
            field = fields.get(name)
            if field is not None and (problem := field(x)) is not None:
                return f"{name} is {problem}"
            if name in self.finite and x is not None and not math.isfinite(x):
                return f"{name} is {_show(x)}, not a finite number"
        if only is None or "unavailable" in only:
            unavailable = v.get("unavailable")
            if unavailable is not None:
                if not isinstance(unavailable, dict):
                    return f"unavailable is {_show(unavailable)}, not an object"
                for name, m in unavailable.items():
                    if (problem := _missing(m)) is not None:
                        return f"unavailable {name} is {problem}"
        return None


def _number_hint(hint: Any) -> bool:
    args = [a for a in typing.get_args(hint) if a not in (Missing, type(None))] \
        if typing.get_origin(hint) in (typing.Union, types.UnionType) else [hint]
    return len(args) == 1 and args[0] in (int, float)


_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = _Shape(cls)
    return shape


def _object(cls: type) -> Check:
    return lambda v: _shape(cls).check(v)


_SNAPSHOT: dict[str, Check] = {
    "system": _object(SystemInfo), "host": _object(HostSample),
    "topology": _kind(Topology | None),
    "warnings": _kind(tuple[str, ...]),
    "schema": _kind(str),
}
assert {f.name for f in dataclasses.fields(Snapshot)} == {"time", *_KEYED, *_SNAPSHOT} - {
    "schema"}, "a Snapshot field without its check"

__all__ = ["MAX_LINE", "check_header", "check_input", "check_tick", "parse_line"]
