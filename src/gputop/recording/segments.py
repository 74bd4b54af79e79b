"""The files of a recording written in segments (RecordingWriter's max_bytes): run.gputop,
run.gputop.1, ...: their names and order, and whether a file goes on a run."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


