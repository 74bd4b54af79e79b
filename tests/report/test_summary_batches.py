"""The recorder diagnoses what it wrote a batch of ticks at a time: its summaries are the ones
it makes taking each tick as it is written, whatever the batch, wherever a file ends, and a
summary that fails on the ticks it had waiting costs the summary only, never a tick."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gputop.feeds.playback import demo_path
from gputop.recording import FOOTER_SIZE, RecordingWriter, read_recording, read_summary
from gputop.report.summary import BATCH_TICKS, SummaryKeeper


@pytest.fixture(scope="module")
def demo() -> list[Any]:
    return read_recording(demo_path()).snapshots


def without_series(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary less what differs between two writings of the same ticks: the series' random
    id, and the bytes it vouches for (its header holds that id)."""
    return {k: v for k, v in summary.items() if k not in ("series", "covers")}


def test_a_run_in_segments_gets_the_same_summaries_whatever_the_batch(
        tmp_path: Path, demo: list[Any]) -> None:
    got = {}
    for batch in (1, 7, BATCH_TICKS, 10_000):
        (tmp_path / f"b{batch}").mkdir()
        with RecordingWriter(tmp_path / f"b{batch}" / "run.gputop", max_bytes=450_000,
                             summarizer=SummaryKeeper(batch=batch)) as w:
            for s in demo:
                w.write(s)
        got[batch] = [without_series(read_summary(f)) for f in w.segments]
    assert len(got[1]) >= 3 and got[1][-1]["recap"]["ticks"] > 0
    assert got[1][0]["findings"] and got[1][-1]["engine"]["tracks"]
    assert got[7] == got[1] and got[BATCH_TICKS] == got[1] and got[10_000] == got[1]


def ticks_written(demo: list[Any], path: Path) -> list[tuple[dict[str, Any], Any, Any]]:
    """Each tick as a writer hands it to its summarizer: (record, patch, Snapshot)."""
    seen: list[tuple[dict[str, Any], Any, Any]] = []

    class Taken:
        def add(self, rec: dict[str, Any], patch: Any, snap: Any = None) -> None:
            seen.append((rec, patch, snap))

        def summary(self, series: str | None, segment: int | None) -> dict[str, Any]:
            return {}

        def next_file(self) -> None:
            pass

    with RecordingWriter(path, keyframe_every=50, summarizer=Taken()) as w:
        for s in demo[:200]:
            w.write(s)
    return seen


def test_a_file_finished_without_its_summary_hands_its_waiting_ticks_on(
        tmp_path: Path, demo: list[Any]) -> None:
    """A segment too small for its summary is finished without asking for it: the ticks the
    keeper still has waiting are the diagnostics' all the same, and that file's recap only."""
    ticks = ticks_written(demo, tmp_path / "taken.gputop")
    summaries = []
    for batch, snapshots in ((1, True), (7, True), (7, False)):
        keeper = SummaryKeeper(batch=batch)
        for n, (rec, patch, snap) in enumerate(ticks):
            if n in (45, 130):  # a file ends, its summary not asked for
                keeper.next_file()
            if n == 90:  # one ends with its summary
                keeper.summary(None, None)
                keeper.next_file()
            keeper.add(rec, patch, snap if snapshots else None)
        summaries.append(keeper.summary(None, None))
    assert summaries[0]["recap"]["ticks"] == 200 - 130
    assert summaries[0]["findings"]
    assert summaries[1] == summaries[0] and summaries[2] == summaries[0]


class Failing(SummaryKeeper):
    """Its diagnostics fail at the 50th tick."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        update, seen = self.engine.update, []

        def failing(snap: Any) -> Any:
            seen.append(snap)
            if len(seen) == 50:
                raise RuntimeError("a diagnostic broke")
            return update(snap)

        self.engine.update = failing  # type: ignore[method-assign]


def footer_line(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()[-FOOTER_SIZE:]))  # type: ignore[no-any-return]


@pytest.mark.parametrize("segments", [False, True])
def test_a_summary_failing_on_its_waiting_ticks_costs_no_tick(
        tmp_path: Path, demo: list[Any], segments: bool) -> None:
    path = tmp_path / "run.gputop"
    kw: dict[str, Any] = {"max_bytes": 450_000} if segments else {}
    ticks = demo if segments else demo[:120]
    with RecordingWriter(path, **kw, summarizer=Failing(batch=60)) as w:
        for s in ticks:
            w.write(s)
    assert all(footer_line(f) == {"no_summary": "error"} for f in w.segments)
    assert len(read_recording(w.segments[0]).snapshots) == len(ticks)  # the whole run
    assert len(w.segments) >= (3 if segments else 1)


def test_a_summarizer_failing_as_a_file_ends_costs_no_tick(tmp_path: Path,
                                                          demo: list[Any]) -> None:
    class Broken(SummaryKeeper):
        def next_file(self) -> None:
            raise RuntimeError("broke")

    path = tmp_path / "run.gputop"
    with RecordingWriter(path, max_bytes=450_000, summarizer=Broken()) as w:
        for s in demo:
            w.write(s)
    assert len(w.segments) >= 3
    assert "signature" in read_summary(w.segments[0])  # written before it broke
    assert all(footer_line(f) == {"no_summary": "error"} for f in w.segments[1:])
    assert len(read_recording(w.segments[0]).snapshots) == len(demo)  # the whole run
