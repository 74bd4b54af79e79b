"""What diagnostics speak in: a `Diagnostic` (a check over a window of Snapshots and how long
what it sees must hold), the `Condition`s a check returns, and the `Finding`s the engine makes of
them. A rule module (diagnose/rules/) needs only these, diagnose.window and the model."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop.model import Snapshot

SEVERITIES = ("info", "warning", "critical")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """A problem found over a stretch of time; `until` is None while it lasts."""

    id: str  # what kind of problem, e.g. "loader.starvation"
    severity: str  # info | warning | critical
    device: int | None
    pid: int | None
    title: str  # one line, with the numbers
    since: float  # epoch s: when the condition began to hold
    until: float | None  # epoch s: when it stopped holding; None while open
    evidence: Mapping[str, float] = field(default_factory=dict)
    cause: str = ""
    fix: str = ""
    # epoch s: when the finding opened, i.e. became visible, once the condition had held for its
    # `for` duration; None for a finding saved before gputop kept it
    opened: float | None = None

    @property
    def open(self) -> bool:
        return self.until is None

    @property
    def detail(self) -> str:
        """The line the findings panel shows under the title."""
        return self.cause

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "device": self.device, "pid": self.pid,
                "start": self.since, "opened": self.opened, "end": self.until,
                "title": self.title, "cause": self.cause, "fix": self.fix,
                "evidence": dict(self.evidence)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """The Finding `to_dict` gave; TypeError or KeyError for anything else."""
        since, until, opened = d["start"], d["end"], d.get("opened")
        if not _time(since) or not all(v is None or _time(v) for v in (until, opened)):
            raise TypeError("a finding's start, opening or end that is not a time")
        return cls(id=_text(d["id"]), severity=_text(d["severity"]), device=_id(d["device"]),
                   pid=_id(d["pid"]), title=_text(d["title"]), since=since, until=until,
                   evidence=_evidence(d["evidence"]), cause=_text(d["cause"]),
                   fix=_text(d["fix"]), opened=opened)


@dataclass(frozen=True)
class Condition:
    """What a diagnostic says holds now. `score` ranks conditions of equal severity: the finding
    keeps the words and numbers of its worst moment, which is what a postmortem wants."""

    id: str
    severity: str
    title: str
    cause: str
    fix: str
    device: int | None = None
    pid: int | None = None
    evidence: Mapping[str, float] = field(default_factory=dict)
    for_s: float | None = None  # overrides the diagnostic's `for` for this clause
    score: float = 0.0

    def __post_init__(self) -> None:
        if self.severity not in _RANK:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def key(self) -> tuple[str, int | None, int | None]:
        return (self.id, self.device, self.pid)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title,
                "cause": self.cause, "fix": self.fix, "device": self.device, "pid": self.pid,
                "evidence": dict(self.evidence), "for_s": self.for_s, "score": self.score}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Condition:
        for_s, score = d["for_s"], d["score"]
        if not (for_s is None or _time(for_s)) or not _time(score):
            raise TypeError("a condition's duration or score that is not a number")
        return cls(id=_text(d["id"]), severity=_text(d["severity"]), title=_text(d["title"]),
                   cause=_text(d["cause"]), fix=_text(d["fix"]), device=_id(d["device"]),
                   pid=_id(d["pid"]), evidence=_evidence(d["evidence"]), for_s=for_s,
                   score=score)


Check = Callable[[Sequence[Snapshot]], Iterable[Condition]]


@dataclass(frozen=True)
class Diagnostic:
    """A check with the window it reads and how long its conditions must hold.

    `clear_s` is how long a condition must be false before its finding closes; None means the
    same as its `for` duration (docs/diagnostics.md §8). `every_s` is how often it runs: rules are
    evaluated every slow tick (5 s) over sliding windows; a check that must answer at once says
    0. `reads_links` False says the check never reads `Snapshot.links`: the engine keeps a
    tick's links (a hundred or more on an NVLink node) only as long as a check that reads them
    looks back, not for the whole of a longer window."""

    name: str
    check: Check
    window_s: float = 60.0
    for_s: float = 0.0
    clear_s: float | None = None
    every_s: float = 5.0
    reads_links: bool = True


def _time(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _text(v: object) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{type(v).__name__} where text was expected")
    return v


def _id(v: object) -> int | None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise TypeError(f"{type(v).__name__} where a GPU index or PID was expected")
    return v


def _evidence(v: object) -> dict[str, float]:
    if not isinstance(v, dict):
        raise TypeError("evidence that is not an object")
    return {_text(k): x for k, x in v.items() if _time(x)}


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
