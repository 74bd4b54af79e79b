"""A run recorded as segments (--record-max-size) is reported on and exported as one run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gputop.commands.main import main
from gputop.recording import RecordingWriter
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series

T0 = 1_800_000_000.0


def segmented(path: Path, ticks: int = 60) -> list[Path]:
    with RecordingWriter(path, max_bytes=1500, summarizer=SummaryKeeper()) as w:
        for s in series(ticks, 2, start=T0):
            w.write(s)
    return w.segments


def test_report_reads_every_segment_from_the_first_file_or_a_glob(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = segmented(tmp_path / "run.gputop")
    assert len(files) >= 3
    for argv in ([str(files[0])], [str(f) for f in reversed(files)]):
        assert main(["report", *argv, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["ticks"] == 60 and doc["end"] - doc["start"] == 59
        assert doc["file"] == argv[0] and doc["warning"] is None


def test_export_reads_every_segment(tmp_path: Path) -> None:
    files = segmented(tmp_path / "run.gputop")
    out = tmp_path / "run.csv"
    assert main(["export", str(files[0]), "-o", str(out)]) == 0
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 60 * 2 and float(rows[-1]["time"]) == T0 + 59
