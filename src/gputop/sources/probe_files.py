"""Reads what `gputop.probe` publishes, for the monitor.

The files are written by processes the monitor does not trust (any user's training script, or
anyone who can write where they live), so a file is used only if it is named <pid>.json, is a
regular file reached without a symlink, is owned by the uid that runs <pid>, is writable by no one
else, is at most 64 KiB, and holds exactly the documented keys with values of the right types and
ranges. Anything else is skipped with a note, never an exception.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputop import probe
from gputop.model.snapshot import PROBE_STALE_AFTER_S
from gputop.probe import MEMORY_FIELDS, SCHEMA_VERSION

MAX_BYTES = 64 * 1024
STALE_AFTER_S = PROBE_STALE_AFTER_S
RUN_USER_ROOT = "/run/user"  # where systemd puts $XDG_RUNTIME_DIR of each uid
MAX_PAIRS = 256
_MAX_BYTES_VALUE = 1 << 50  # 1 PiB: no GPU holds more
_MAX_COUNT = 1 << 53  # exactly representable in JSON doubles
_MAX_SECONDS = 1e7
_UUID = re.compile(r"(GPU-|MIG-)?[0-9A-Fa-f-]{8,64}")
_CONF = re.compile(r"[ -~]{0,512}")  # printable ASCII: shown in the UI as is


@dataclass(frozen=True)
class ProbeSample:
    """One process's probe payload (docs/probe.md). Memory fields are None when the process has
    no CUDA context (or no torch)."""

    pid: int
    ts: float
    device: int | None
    uuid: str | None
    allocated: int | None
    reserved: int | None
    active: int | None
    inactive_split: int | None
    peak_allocated: int | None
    peak_reserved: int | None
    num_alloc_retries: int | None
    num_ooms: int | None
    allocator_conf: str | None
    steps: int
    step_time_s: float | None
    loader_wait_s: float
    wait_frac: float | None
    recent_wait_frac: float | None  # None also where the probe predates it
    batch_sizes: tuple[tuple[int, int], ...]  # (batch size, step peak allocated), oldest first
    torch: str | None


class Rejected(ValueError):
    """Why a probe file is not used."""


def _int(lo: int, hi: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if type(v) is not int or not lo <= v <= hi:  # bool is an int subclass: excluded
            raise Rejected(f"not an integer in [{lo}, {hi}]")
        return v
    return check


def _float(lo: float, hi: float) -> Callable[[Any], float]:
    def check(v: Any) -> float:
        if type(v) not in (int, float) or not math.isfinite(v) or not lo <= v <= hi:
            raise Rejected(f"not a number in [{lo:g}, {hi:g}]")
        return float(v)
    return check


def _text(pattern: re.Pattern[str]) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if type(v) is not str or not pattern.fullmatch(v):
            raise Rejected("not an acceptable string")
        return v
    return check


def _pairs(v: Any) -> tuple[tuple[int, int], ...]:
    if type(v) is not list or len(v) > MAX_PAIRS:
        raise Rejected(f"not a list of at most {MAX_PAIRS} pairs")
    batch, peak = _int(1, _MAX_COUNT), _int(0, _MAX_BYTES_VALUE)
    out = []
    for p in v:
        if type(p) is not list or len(p) != 2:
            raise Rejected("not a [batch, peak] pair")
        out.append((batch(p[0]), peak(p[1])))
    return tuple(out)


_BYTES = _int(0, _MAX_BYTES_VALUE)
# key -> (check, may be null)
FIELDS: dict[str, tuple[Callable[[Any], Any], bool]] = {
    "v": (_int(SCHEMA_VERSION, SCHEMA_VERSION), False),
    "ts": (_float(0.0, 1e11), False),
    "pid": (_int(1, 1 << 31), False),
    "device": (_int(0, 1023), True),
    "uuid": (_text(_UUID), True),
    **{f: (_int(0, _MAX_COUNT) if f.startswith("num_") else _BYTES, True)
       for f in MEMORY_FIELDS},
    "allocator_conf": (_text(_CONF), True),
    "steps": (_int(0, _MAX_COUNT), False),
    "step_time_s": (_float(0.0, _MAX_SECONDS), True),
    "loader_wait_s": (_float(0.0, _MAX_SECONDS), False),
    "wait_frac": (_float(0.0, 1.0), True),
    "recent_wait_frac": (_float(0.0, 1.0), True),
    "batch_sizes": (_pairs, False),
    "torch": (_text(re.compile(r"[0-9A-Za-z.+_-]{1,64}")), True),
}
# Keys a probe of an earlier gputop does not write: absent reads as null.
OPTIONAL = frozenset({"recent_wait_frac"})


def parse_payload(raw: bytes, pid: int) -> ProbeSample:
    """Strict: exactly the documented keys (those in OPTIONAL may be absent), each of the
    documented type and range."""
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant,
                         object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:  # RecursionError: hostile nesting
        raise Rejected(f"not JSON ({type(e).__name__})") from None
    if type(doc) is not dict:
        raise Rejected("not a JSON object")
    missing, extra = FIELDS.keys() - doc.keys() - OPTIONAL, doc.keys() - FIELDS.keys()
    if missing or extra:
        raise Rejected(f"keys missing {sorted(missing)}, unexpected {len(extra)}")
    values: dict[str, Any] = {}
    for key, (check, nullable) in FIELDS.items():
        v = doc.get(key)  # absent: only an OPTIONAL key, checked above
        if v is None and nullable:
            values[key] = None
            continue
        try:
            values[key] = check(v)
        except Rejected as e:
            raise Rejected(f"{key}: {e}") from None
    if values["pid"] != pid:
        raise Rejected(f"pid {values['pid']} in the file named for {pid}")
    del values["v"]
    return ProbeSample(**values)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        raise ValueError("duplicate key")
    return doc


def probe_dirs(uid: int) -> list[Path]:
    """Where a process of `uid` publishes: its $XDG_RUNTIME_DIR (which we know only for our own
    uid, else systemd's /run/user/<uid>), then /tmp/gputop-<uid>."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    return list(_probe_dirs(uid, xdg if uid == os.getuid() else "", RUN_USER_ROOT,
                            probe.TMP_ROOT))


@functools.lru_cache(maxsize=64)
def _probe_dirs(uid: int, xdg: str, run_root: str, tmp_root: str) -> tuple[Path, ...]:
    """`probe_dirs` of what it depends on: asked every tick, for every user with a GPU process."""
    dirs = []
    if os.path.isabs(xdg):
        dirs.append(Path(xdg) / "gputop")
    dirs += [Path(run_root) / str(uid) / "gputop", probe.tmp_dir(uid)]
    return tuple(dict.fromkeys(dirs))


def _check_owner(st: os.stat_result, uid: int, what: str) -> None:
    if st.st_uid != uid:
        raise Rejected(f"{what} is owned by uid {st.st_uid}, not the process's uid {uid}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Rejected(f"{what} is writable by group or others")


def _read_file(path: Path, uid: int) -> bytes | None:
    """The file's bytes if it is safe to use, None if there is none; Rejected otherwise."""
    try:
        d = os.lstat(path.parent)
    except OSError:
        return None
    if not stat.S_ISDIR(d.st_mode):
        raise Rejected(f"{path.parent} is not a directory")
    _check_owner(d, uid, str(path.parent))
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: a FIFO planted here must not hang the monitor
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Rejected("is a symlink") from None
        return None  # absent, or not ours to read: nothing to show, nothing hostile
    try:
        st = os.fstat(fd)  # of what was opened, so it cannot be swapped after the check
        if not stat.S_ISREG(st.st_mode):
            raise Rejected("is not a regular file")
        _check_owner(st, uid, "file")
        if st.st_size > MAX_BYTES:
            raise Rejected(f"is {st.st_size} bytes (limit {MAX_BYTES})")
        raw = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        raise Rejected(f"grew past {MAX_BYTES} bytes")
    return raw


def read_probe(pid: int, uid: int, now: float, notes: list[str] | None = None,
               listed: dict[Path, frozenset[str] | None] | None = None) -> ProbeSample | None:
    """The freshest valid, non-stale payload of `pid` (run by `uid`), or None. `listed` holds
    the names in each of `uid`'s directories (None where it could not be listed) when the
    caller listed them: a file that is not there is then not looked for."""
    best: ProbeSample | None = None
    name = f"{pid}.json"
    for d in (probe_dirs(uid) if listed is None else listed):
        names = listed.get(d) if listed is not None else None
        if names is not None and name not in names:
            continue
        path = d / name
        try:
            raw = _read_file(path, uid)
            if raw is None:
                continue
            sample = parse_payload(raw, pid)
            if sample.ts > now + STALE_AFTER_S:
                raise Rejected("timestamp is in the future")
        except Rejected as e:
            if notes is not None:
                notes.append(f"probe file {path} ignored: {e}")
            continue
        if now - sample.ts <= STALE_AFTER_S and (best is None or sample.ts > best.ts):
            best = sample
    return best


def _listing(d: Path) -> frozenset[str] | None:
    """The names in a probe directory: empty where there is none, None where it may not be
    listed (a directory that can be searched but not read: its files are looked for)."""
    try:
        return frozenset(os.listdir(d))
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()
    except OSError:
        return None


def read_probes(pids_to_uids: dict[int, int], now: float,
                notes: list[str] | None = None) -> dict[int, ProbeSample]:
    """Probe samples of the given processes (pid -> uid that runs it); `now` is wall-clock time
    (time.time()). Files older than STALE_AFTER_S are ignored: the process hung or exited
    without removing its file. Why a file was rejected is appended to `notes`. Each directory
    is listed once, so a process that publishes nothing costs no file system call."""
    listed = {uid: {d: _listing(d) for d in probe_dirs(uid)}
              for uid in set(pids_to_uids.values())}
    out: dict[int, ProbeSample] = {}
    for pid, uid in pids_to_uids.items():
        sample = read_probe(pid, uid, now, notes, listed[uid])
        if sample is not None:
            out[pid] = sample
    return out
