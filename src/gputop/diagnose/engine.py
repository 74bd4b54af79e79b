"""The diagnostics engine: windows of Snapshots in, Findings out.

A `Diagnostic` is a pure function of a window of Snapshots (oldest first) that returns the
`Condition`s holding now. The engine turns conditions into `Finding`s the way an alerting system
does (docs/diagnostics.md §8): a condition must hold for its `for` duration before a finding opens,
and an open finding closes only after the condition has been false for the same duration, so a
finding does not flap. The engine has no clock and does no I/O: time is `Snapshot.time`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gputop.diagnose.types import _RANK, Condition, Diagnostic, Finding, _id, _number, _text, _time
from gputop.diagnose.window import History
from gputop.model import Snapshot

# A diagnostic that raises is switched off and reported once with this id.
BROKEN_ID = "diagnose.broken"


@dataclass
class _Track:
    """One condition key through time."""

    pending_since: float | None = None
    false_since: float | None = None
    best: Condition | None = None  # the worst moment so far
    finding: Finding | None = None


def _worse(a: Condition, b: Condition | None) -> bool:
    if b is None:
        return True
    return (_RANK[a.severity], a.score) >= (_RANK[b.severity], b.score)


class Engine:
    """Runs diagnostics over Snapshots, live (`update`) or over a recording (`run`)."""

    def __init__(self, diagnostics: Iterable[Diagnostic],
                 broken: Iterable[tuple[str, str]] = ()) -> None:
        """`diagnostics`: what to run (gputop.diagnose.default_engine gives the built-in ones and
        the plug-ins); `broken` lists (name, why) of plug-ins that could not be loaded, reported
        as warning findings at the first tick."""
        self.diagnostics = list(diagnostics)
        self._all = tuple(self.diagnostics)  # as given: what a saved state refers to
        self.notes: list[str] = [f"{name}: {msg}" for name, msg in broken]
        self._broken_pending = list(broken)  # reported as findings at the first snapshot
        self._span = max((d.window_s for d in self.diagnostics), default=0.0)
        self._links_span = max((d.window_s for d in self.diagnostics if d.reads_links),
                               default=0.0)
        self._window = History()  # the last `_span` seconds of ticks, and what rules read
        # Keyed by the Diagnostic itself, so two plug-ins that chose the same name stay apart.
        self._tracks: dict[tuple[Diagnostic, tuple[str, int | None, int | None]], _Track] = {}
        self._closed: list[Finding] = []
        self._ran: dict[Diagnostic, float] = {}  # when each diagnostic last ran
        self._notices: list[Finding] = []  # broken diagnostics, open for good

    # -- live --------------------------------------------------------------------------------

    def update(self, snap: Snapshot) -> list[Finding]:
        """Takes one tick; returns the findings open now."""
        history = self._window
        if history.times and snap.time <= history.times[-1]:
            return self.open_findings()  # a repeated or out-of-order tick says nothing new
        history.append(snap)
        history.forget_before(snap.time - self._span)
        history.drop_links_before(snap.time - self._links_span)
        history.trim_columns()
        for name, msg in self._broken_pending:
            self._notices.append(_broken(name, msg, snap.time))
        self._broken_pending.clear()
        for diag in list(self.diagnostics):
            ran = self._ran.get(diag)
            if ran is not None and snap.time - ran < diag.every_s:
                continue
            self._ran[diag] = snap.time
            sub = history.since(snap.time - diag.window_s)
            try:
                conds = list(diag.check(sub))
                for c in conds:
                    if not isinstance(c, Condition):
                        raise TypeError(f"returned {type(c).__name__}, not a Condition")
            except Exception as e:
                self.diagnostics.remove(diag)
                self._drop(diag)
                self._notice(diag.name, f"{type(e).__name__}: {e}", snap.time)
                continue
            self._apply(diag, conds, snap.time)
        return self.open_findings()

    def open_findings(self) -> list[Finding]:
        found = [t.finding for t in self._tracks.values() if t.finding is not None]
        return sorted([*self._notices, *found], key=_order)

    # -- over a recording ----------------------------------------------------------------------

    def run(self, snapshots: Iterable[Snapshot]) -> list[Finding]:
        """Feeds every Snapshot; returns the timeline: closed findings and those still open."""
        for s in snapshots:
            self.update(s)
        return self.timeline()

    def timeline(self) -> list[Finding]:
        """Every finding so far, oldest first. One whose condition has stopped holding but has not
        yet been false for its clearing time ends where it stopped: that is the best estimate when
        a recording ends in between."""
        ending = [dataclasses.replace(t.finding, until=t.false_since)
                  for t in self._tracks.values()
                  if t.finding is not None and t.false_since is not None]
        still = [t.finding for t in self._tracks.values()
                 if t.finding is not None and t.false_since is None]
        return sorted([*self._closed, *self._notices, *ending, *still],
                      key=lambda f: (f.since, _order(f)))

    # -- going on from a saved state ---------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What the engine knows besides its window of Snapshots, as JSON: with the Snapshots
        from `window_from` on, `restore` makes an engine of the same diagnostics go on exactly
        as this one would. Diagnostics are named by their place in the list it was given."""
        place = {d: i for i, d in enumerate(self._all)}
        return {
            "window_from": self._window.times[0] if self._window.times else None,
            "running": [place[d] for d in self.diagnostics],
            "notes": list(self.notes),
            "broken_pending": [list(b) for b in self._broken_pending],
            "notices": [f.to_dict() for f in self._notices],
            "closed": [f.to_dict() for f in self._closed],
            "ran": [[place[d], t] for d, t in self._ran.items()],
            "tracks": [[place[d], list(key), t.pending_since, t.false_since,
                        None if t.best is None else t.best.to_dict(),
                        None if t.finding is None else t.finding.to_dict()]
                       for (d, key), t in self._tracks.items()],
        }

    def restore(self, state: Mapping[str, Any], window: Iterable[Snapshot]) -> None:
        """Takes up a `state()` of an engine of the same diagnostics, with the Snapshots it
        held (those from its `window_from` on, oldest first). A state that does not fit raises
        KeyError, TypeError, ValueError or IndexError, and leaves this engine as it was."""
        every = self._all

        def track(i: int, key: list[Any], pending: Any, false_since: Any, best: Any,
                  finding: Any) -> tuple[tuple[Diagnostic, Any], _Track]:
            if not (pending is None or _time(pending)) or not (
                    false_since is None or _time(false_since)):
                raise TypeError("a condition's times that are not times")
            k = (_text(key[0]), _id(key[1]), _id(key[2]))
            return (every[i], k), _Track(
                pending, false_since, None if best is None else Condition.from_dict(best),
                None if finding is None else Finding.from_dict(finding))

        running = [every[i] for i in state["running"]]
        notes = [_text(n) for n in state["notes"]]
        pending = [(_text(a), _text(b)) for a, b in state["broken_pending"]]
        notices = [Finding.from_dict(f) for f in state["notices"]]
        closed = [Finding.from_dict(f) for f in state["closed"]]
        ran = {every[i]: float(t) for i, t in state["ran"]}
        tracks = dict(track(*t) for t in state["tracks"])
        history = History()
        for snap in window:
            if not history.times or snap.time > history.times[-1]:  # as `update` takes them
                history.append(snap)
        self.diagnostics, self.notes, self._broken_pending = running, notes, pending
        self._notices, self._closed, self._ran, self._tracks = notices, closed, ran, tracks
        self._window = history

    # -- the state machine -------------------------------------------------------------------

    def _apply(self, diag: Diagnostic, conds: list[Condition], now: float) -> None:
        holding: dict[tuple[str, int | None, int | None], Condition] = {}
        for c in conds:  # one condition per key: the worst, if a check repeats itself
            if _worse(c, holding.get(c.key)):
                holding[c.key] = c
        for key, c in holding.items():
            track = self._tracks.setdefault((diag, key), _Track())
            track.false_since = None
            if track.pending_since is None:
                track.pending_since = now
            if _worse(c, track.best):
                track.best = c
            for_s = c.for_s if c.for_s is not None else diag.for_s
            if track.finding is not None or now - track.pending_since >= for_s:
                opened = track.finding.opened if track.finding is not None else now
                track.finding = _finding(track.best, track.pending_since, opened)
        for tkey, track in list(self._tracks.items()):
            owner, key = tkey
            if owner is not diag or key in holding:
                continue
            if track.finding is None:
                del self._tracks[tkey]  # it never opened: start over next time
                continue
            if track.false_since is None:
                track.false_since = now
            assert track.best is not None
            for_s = track.best.for_s if track.best.for_s is not None else diag.for_s
            clear_s = diag.clear_s if diag.clear_s is not None else for_s
            if now - track.false_since >= clear_s:
                self._closed.append(dataclasses.replace(track.finding, until=track.false_since))
                del self._tracks[tkey]

    def _drop(self, diag: Diagnostic) -> None:
        for tkey in [k for k in self._tracks if k[0] is diag]:
            track = self._tracks.pop(tkey)
            if track.finding is not None and self._window.times:
                self._closed.append(dataclasses.replace(track.finding,
                                                        until=self._window.times[-1]))

    def _notice(self, name: str, message: str, now: float) -> None:
        self.notes.append(f"{name}: {message}")
        self._notices.append(_broken(name, message, now))


def _broken(name: str, message: str, now: float) -> Finding:
    return Finding(
        id=BROKEN_ID, severity="warning", device=None, pid=None,
        title=f"diagnostic {name!r} is switched off: {message}", since=now, until=None,
        opened=now,
        cause="The diagnostic failed to load or raised an error; the others still run.",
        fix="Update or uninstall the package that provides it.")


def _finding(c: Condition | None, since: float, opened: float | None) -> Finding:
    assert c is not None
    evidence = {k: float(v) for k, v in c.evidence.items() if _number(v)}
    return Finding(id=c.id, severity=c.severity, device=c.device, pid=c.pid, title=c.title,
                   since=since, until=None, evidence=evidence, cause=c.cause, fix=c.fix,
                   opened=opened)












def _order(f: Finding) -> tuple[int, int, str]:
    return (-_RANK[f.severity], -1 if f.device is None else f.device, f.id)
