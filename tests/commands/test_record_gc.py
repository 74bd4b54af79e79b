"""A headless recorder runs for days: once its first tick is written, what start-up built is set
aside from the garbage collector and its youngest generation is collected less often; and a
recording that ends leaves the collector as it found it (main may be called again)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from gputop.commands.main import main
from gputop.feeds import STEADY_GC_THRESHOLD
from gputop.recording import RecordingWriter, read_recording


def test_a_headless_recording_sets_the_collector_aside_and_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold(), gc.get_freeze_count()
    seen: list[tuple[tuple[int, int, int], int]] = []
    write = RecordingWriter.write

    def watched(self: RecordingWriter, snap: object) -> None:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))  # as the tick comes
        write(self, snap)  # type: ignore[arg-type]

    monkeypatch.setattr(RecordingWriter, "write", watched)
    out = tmp_path / "run.gputop"
    assert main(["--demo", "--record", str(out), "--headless", "--count", "3",
                 "--interval", "0.01"]) == 0
    assert len(read_recording(out).snapshots) == 3
    first, *rest = seen
    assert first == before  # start-up still going: as it was
    for threshold, frozen in rest:
        assert threshold[0] == max(before[0][0], STEADY_GC_THRESHOLD)
        assert threshold[1:] == before[0][1:]
        assert frozen > before[1]  # the modules, the diagnostics...
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
