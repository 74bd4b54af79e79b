"""A recording's summary: what `gputop report` needs of a file, worked out while it is written.

Reading every tick of a day-long recording takes minutes (inflating, parsing, building each
Snapshot, diagnosing it), so the recorder does that work as it records: it keeps the report's
`Recap` of the file and runs the diagnostics over each tick exactly as a reader will get it back
(after the writer's rounding, in the reader's order), and when it finishes the file it appends
both as a summary line (docs/recording.md). `gputop report` then reads the summaries, not the
ticks, when every file has one made by the same diagnostics it would run; otherwise it reads the
ticks, and says why.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gputop import __version__
from gputop.diagnose import default_engine
from gputop.diagnose.engine import Engine
from gputop.diagnose.types import Finding
from gputop.errors import RecordingError
from gputop.model import Snapshot
from gputop.recording import (
    ReadBack,
    RecordingReader,
    SeriesReader,
    SummaryDamaged,
    read_summary,
    ticks_match,
)
from gputop.recording.index import RecordingIndex
from gputop.report.recap import Recap
from gputop.safetext import printable

# CPython's own SHA-256 where it has it: hashlib loads OpenSSL, 3.5 MiB resident for the whole
# of a recording, for one digest.
if TYPE_CHECKING:
    from hashlib import sha256
else:
    try:
        from _sha256 import sha256  # Python 3.10, 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # Python 3.12 on
        except ImportError:
            from hashlib import sha256

# The recorder decodes and diagnoses the ticks it wrote this many at a time: one tick a second
# finds the CPU's caches cold, and its summary work takes over half as long again as that of
# ticks taken one after another (1.5 ms against 0.9 on the fake 8x H100 node). The ticks
# waiting hold about 40 kB each; a summary takes them first.
BATCH_TICKS = 20
MAX_FINDINGS = 20_000  # in a summary a reader takes; a run with more is read tick by tick


class Damaged(str):
    """Why a summary cannot stand for its file's ticks, when the file was damaged: the report
    warns of it in every output form, not only in its note."""


# Besides each diagnostic's own module, what decides what the diagnostics find.
_ENGINE_MODULES = ("gputop.diagnose.engine", "gputop.diagnose.types", "gputop.diagnose.window",
                   "gputop.model.snapshot")


def signature(engine: Engine) -> dict[str, Any]:
    """Which diagnostics an engine runs: gputop's version, the diagnostics' names (built-in and
    plug-ins), the plug-ins that failed to load, and a digest of the code they are made of, so
    that a summary made by other rules is not taken for this engine's."""
    modules = sorted({*_ENGINE_MODULES,
                      *(str(getattr(d.check, "__module__", "")) for d in engine.diagnostics)})
    return {"gputop": __version__, "diagnostics": [d.name for d in engine.diagnostics],
            "broken": list(engine.notes), "code": _digest(tuple(modules))}


@cache
def _digest(modules: tuple[str, ...]) -> str:
    h = sha256()
    for name in modules:
        h.update(name.encode() + b"\0")
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            try:
                h.update(Path(path).read_bytes())
            except OSError:
                pass  # a module not read from a file: its name stands for it
        h.update(b"\0")
    return h.hexdigest()[:16]


class SummaryKeeper:
    """The recorder's side: takes each tick as written and gives each finished file's summary.

    One engine runs over the whole run, across the files of a series, as `gputop report` does
    over them; the recap starts again with each file."""

    def __init__(self, batch: int = BATCH_TICKS) -> None:
        self.engine = default_engine()
        self.signature = signature(self.engine)
        self.recap = Recap()
        self._read_back = ReadBack()
        self._first_segment: int | None = None
        self._batch = max(1, batch)
        self._pending: list[tuple[dict[str, Any], dict[str, Any] | None, Snapshot | None]] = []

    def add(self, rec: dict[str, Any], patch: dict[str, Any] | None,
            snap: Snapshot | None = None) -> None:
        """One tick as the writer wrote it: a keyframe (`patch` is None) or a patch, and the
        Snapshot written (what a reader gets back is worked out from it where it is given, else
        decoded from `rec`). It is taken with the next ones, `batch` at a time; `summary` and
        `next_file` take those waiting."""
        self._pending.append((rec, patch, snap))
        if len(self._pending) >= self._batch:
            self._catch_up()

    def _catch_up(self) -> None:
        """Diagnoses the ticks waiting as a reader gets them back, in the order they were
        written: the same calls on the same ticks as one at a time (the writer never changes a
        tick's record once written), made while the code and data they touch are in the CPU's
        caches."""
        pending, self._pending = self._pending, []
        read, update, add = self._read_back.read, self.engine.update, self.recap.add
        for rec, patch, written in pending:
            # What a reader rebuilds, in its key order (which orders the devices and
            # processes), sharing what did not change.
            snap = read(rec, patch, written)
            update(snap)
            add(snap)

    def summary(self, series: str | None, segment: int | None) -> dict[str, Any]:
        """The summary of the file being written, up to now."""
        self._catch_up()
        if self._first_segment is None:
            self._first_segment = segment
        return {"signature": self.signature, "series": series, "segment": segment,
                "diagnosed_from": self._first_segment, "recap": self.recap.to_json(),
                "findings": [f.to_dict() for f in self.engine.timeline()],
                "engine": self.engine.state()}

    def next_file(self) -> None:
        self._catch_up()  # the ticks of the file finished, its summary written or not
        self.recap = Recap()


# -- reading ---------------------------------------------------------------------------------


@dataclass
class Summarized:
    """A recording read from its summaries. When its last file has none (a run killed or still
    going), `rest` is that file: `engine` was brought to where the file before it ends, and
    reading `rest`'s ticks gives the rest of the recap and the findings."""

    header: dict[str, Any]
    recap: Recap
    findings: list[Finding]
    rest: Path | None = None
    why: str = ""  # why `rest` is read tick by tick (Damaged when it was damaged)


def from_summaries(files: str | Sequence[str], engine: Engine) -> Summarized | str:
    """The recording's recap and findings from its files' summaries, or why they cannot stand
    for reading its ticks with `engine` (then read the ticks)."""
    reader = SeriesReader(files)
    sig = signature(engine)
    recap = Recap()
    last: Mapping[str, Any] | None = None
    done: list[Path] = []  # the files read from their summaries
    opened = list(reader.files())
    for n, r in enumerate(opened):
        r.close()
        name = r.path.name
        try:
            s = read_summary(r.path)
        except RecordingError as e:
            why = Damaged(e) if isinstance(e, SummaryDamaged) else str(e)
            if n == len(opened) - 1 and last is not None:
                return _carry_on(reader, recap, last, done, r.path, engine, why)
            return why
        if s.get("signature") != sig:
            return f"{name} was diagnosed by other rules (gputop {_version(s)})"
        # A summary vouches for the bytes before it (older ones vouch for nothing and are
        # taken as they are): ticks damaged since it was written are read, and said.
        if "covers" in s and not ticks_match(r.path, s["covers"]):
            return Damaged(f"{name} has changed since its summary was written (its ticks "
                           "are damaged)")
        if s.get("series") != r.header.get("series") or s.get("segment") != r.header.get(
                "segment"):
            return f"{name}'s summary is of another file"
        if last is None and s.get("diagnosed_from") != s.get("segment"):
            return (f"{name} is not the first file of its run (an earlier one was deleted); "
                    "its summary covers them")
        try:
            recap.merge(Recap.from_json(s["recap"]))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            return f"{name}'s summary is damaged ({type(e).__name__}: {e})"
        last = s
        done.append(r.path)
    if reader.warning:
        return reader.warning
    if last is None:
        return "no file has a summary"
    if not isinstance(last.get("findings"), list) or len(last["findings"]) > MAX_FINDINGS:
        return f"{done[-1].name}'s summary holds more than {MAX_FINDINGS} findings"
    try:
        findings = [Finding.from_dict(f) for f in last["findings"]]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return f"{done[-1].name}'s summary findings are damaged ({type(e).__name__}: {e})"
    return Summarized(reader.header, recap, findings)


def _carry_on(reader: SeriesReader, recap: Recap, last: Mapping[str, Any],
              before: list[Path], rest: Path, engine: Engine, why: str) -> Summarized | str:
    """Brings `engine` to the end of the files `before` (the last one's summary holds its state;
    the ticks of its window are read back from the end of those files), for a last file `rest`
    without a summary to be read tick by tick."""
    if reader.warning:
        return reader.warning
    name = before[-1].name
    try:
        state = last["engine"]
        start = state["window_from"]
        window: list[Snapshot] = []
        for path in reversed(before if start is not None else []):
            with RecordingIndex(path) as index:
                ticks = index.reader()
                try:
                    window[:0] = [ticks.snapshot(i)
                                  for i in range(index.tick_at(start), index.ticks)
                                  if index.time(i) >= start]
                finally:
                    ticks.close()
                if index.ticks and index.times[0] <= start:
                    break
        engine.restore(state, window)
    except (RecordingError, KeyError, TypeError, ValueError, IndexError,
            AttributeError) as e:
        text = f"{why}, and {name}'s summary cannot be taken up ({type(e).__name__}: {e})"
        return Damaged(text) if isinstance(why, Damaged) else text
    return Summarized(reader.header, recap, [], rest=rest, why=why)


def _version(s: Mapping[str, Any]) -> str:
    sig = s.get("signature")
    return str(sig.get("gputop", "?")) if isinstance(sig, dict) else "?"


def diagnose(files: str | Sequence[str], *, note: TextIO | None = None,
             ) -> tuple[dict[str, Any], Recap, list[Finding], str | None]:
    """(header, recap, findings, warning) of a recording: from the summaries its writer left
    at the end of each file when they stand for its ticks (gputop.report.summary), else by
    reading every tick. Why the ticks are read goes to `note`, in one line."""
    from gputop.report.summary import from_summaries

    engine = default_engine()
    got = from_summaries(files, engine)
    if not isinstance(got, str) and got.rest is None:
        return got.header, got.recap, got.findings, None
    reader: SeriesReader | RecordingReader
    if isinstance(got, str):
        cause, reader = got, SeriesReader(files)
        why = f"{got}: reading the recording tick by tick"
        header, recap = reader.header, Recap()
    else:  # the files before the last had summaries: the engine goes on from where they end
        assert got.rest is not None
        cause, reader = got.why, RecordingReader(got.rest)
        why = f"{got.why}: reading its ticks"
        header, recap = got.header, got.recap
    if note is not None:
        print(f"gputop: {printable(why)}", file=note)
    rest = Recap()
    for snap in reader:
        engine.update(snap)
        rest.add(snap)
    recap.merge(rest)
    # Damage found in a summary is the report's warning too, not only a note on stderr.
    warnings = [cause] if isinstance(cause, Damaged) else []
    return header, recap, engine.timeline(), "; ".join([*warnings, *filter(None, [
        reader.warning])]) or None


__all__ = ["Damaged", "Summarized", "SummaryKeeper", "diagnose", "from_summaries", "signature"]
