"""A recording of a run that lasts days: files of bounded size (segments) that each read on their
own and together read as one recording, in order, with only the newest K kept if asked; and the
digits a recording keeps."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputop.errors import RecordingError
from gputop.recording import (
    RecordingReader,
    RecordingWriter,
    read_recording,
    read_series,
    round_to_sensor,
    segment_paths,
    to_record,
)
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series

SNAPS = series(120, 4)
SEG = 1500  # bytes: a few files for SNAPS


def one_second_apart(snaps: list[Any]) -> bool:
    """The demo's ticks are 1 s apart however fast it is recorded: a gap is a lost tick."""
    return all(b.time - a.time == pytest.approx(1.0, abs=0.02)
               for a, b in itertools.pairwise(snaps))


def record(path: Path, snaps: list[Any], **kw: Any) -> RecordingWriter:
    with RecordingWriter(path, **kw, summarizer=SummaryKeeper()) as w:
        for s in snaps:
            w.write(s)
    return w


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in gzip.decompress(path.read_bytes()).splitlines()]


def test_a_long_run_goes_on_in_numbered_files_none_past_the_size(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    w = record(path, SNAPS, max_bytes=SEG)
    files = segment_paths(path)
    assert files == [path] + [tmp_path / f"run.gputop.{n}" for n in range(1, len(files))]
    assert len(files) >= 3 and w.segments == files
    assert all(f.stat().st_size <= SEG for f in files)
    assert w.bytes_written == sum(f.stat().st_size for f in files)


def test_every_segment_starts_with_a_header_and_a_keyframe_and_reads_alone(
        tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS, max_bytes=SEG, meta={"host": "node7"})
    got = []
    series_id = None
    for n, f in enumerate(segment_paths(path)):
        first, second = lines(f)[:2]
        assert first["type"] == "header" and first["meta"] == {"host": "node7"}
        assert first["segment"] == n
        series_id = series_id or first["series"]
        assert first["series"] == series_id
        assert "k" in second
        alone = read_recording(f) if n else RecordingReader(f)
        snaps = alone.snapshots if n else list(alone)
        assert alone.warning is None  # finished: a complete gzip stream
        got += snaps
    assert got == SNAPS


def test_the_first_file_reads_the_whole_series_in_order(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS, max_bytes=SEG)
    result = read_recording(path)
    assert result.warning is None
    assert result.snapshots == SNAPS


def test_a_shell_glob_reads_in_segment_order_not_name_order(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:12], max_bytes=1)  # a tick a file: run.gputop, .1, ... .11
    files = [str(f) for f in tmp_path.iterdir()]
    assert len(files) == 12
    random.Random(3).shuffle(files)
    assert read_series(files).snapshots == SNAPS[:12]
    assert read_series(sorted(files)).snapshots == SNAPS[:12]  # .10 comes after .9


def test_keep_leaves_the_newest_files_and_they_still_read_as_one(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    w = record(path, SNAPS, max_bytes=SEG, keep=2)
    on_disk = sorted(tmp_path.iterdir())
    assert len(on_disk) == 2 and path not in on_disk
    assert w.segments == segment_paths(path)
    result = read_recording(path)  # the first file is gone: its followers are found
    assert result.warning is None
    assert result.snapshots == SNAPS[-len(result.snapshots):]
    assert 0 < len(result.snapshots) < len(SNAPS)


def test_a_recording_not_written_in_segments_ignores_files_named_like_them(
        tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:5])
    record(tmp_path / "run.gputop.1", SNAPS[50:55])  # another run that happens to share a name
    assert read_recording(path).snapshots == SNAPS[:5]


def test_a_file_of_another_run_ends_the_series_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:3], max_bytes=1)
    os.unlink(tmp_path / "run.gputop.2")
    record(tmp_path / "other", SNAPS[60:62], max_bytes=1)
    os.rename(tmp_path / "other.1", tmp_path / "run.gputop.2")
    result = read_recording(path)
    assert result.snapshots == SNAPS[:2]
    assert result.warning and "not the next segment" in result.warning


def test_a_missing_middle_file_is_said_and_the_rest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:4], max_bytes=1)
    os.unlink(tmp_path / "run.gputop.1")
    result = read_recording(path)
    assert result.snapshots == [SNAPS[0], *SNAPS[2:4]]
    assert result.warning and "segment 1 is missing" in result.warning


def test_an_empty_last_file_from_a_writer_killed_as_it_began_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    record(path, SNAPS[:3], max_bytes=1)
    (tmp_path / "run.gputop.3").write_bytes(b"")
    result = read_recording(path)
    assert result.snapshots == SNAPS[:3]
    assert result.warning and "skipped" in result.warning


def test_rotating_never_overwrites_files_of_an_earlier_run(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    (tmp_path / "run.gputop.4").write_text("precious")
    with pytest.raises(RecordingError, match=r"run\.gputop\.4 already exists"):
        RecordingWriter(path, max_bytes=10_000, summarizer=SummaryKeeper())
    assert (tmp_path / "run.gputop.4").read_text() == "precious"
    assert not path.exists()


def test_without_a_size_the_recording_is_one_file_as_before(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    w = record(path, SNAPS)
    assert w.segments == [path] and list(tmp_path.iterdir()) == [path]
    assert set(lines(path)[0]) == {"type", "format", "version", "gputop", "meta"}


# -- precision -------------------------------------------------------------------------------------


def test_a_recording_keeps_what_sensors_measure_and_drops_the_noise() -> None:
    rec = {"host": {"cpu_percent": 43.2871, "iowait_percent": 0.04999,
                    "cpu_percent_per_core": [99.6, 0.4, 51.5]},
           "devices": {"0": {"pcie_rx": 6304768.0, "pcie_tx": 0.0, "power_draw": 612.37}},
           "processes": {"0:7": {"cpu_percent": 101.4, "rss": 123456789,
                                 "children": [{"pid": 8, "cpu_percent": 97.5}]}},
           "links": {"0:0": {"rx": 1308160234.7, "tx": 512.0, "speed": 26562500000.0}}}
    round_to_sensor(rec)
    assert rec == {"host": {"cpu_percent": 43.3, "iowait_percent": 0.0,
                            "cpu_percent_per_core": [100.0, 0.0, 52.0]},
                   "devices": {"0": {"pcie_rx": 6300000.0, "pcie_tx": 0.0, "power_draw": 612.37}},
                   "processes": {"0:7": {"cpu_percent": 101.0, "rss": 123456789,
                                         "children": [{"pid": 8, "cpu_percent": 98.0}]}},
                   "links": {"0:0": {"rx": 1310000000.0, "tx": 512.0,
                                     "speed": 26562500000.0}}}


def test_values_already_at_sensor_precision_read_back_exactly(tmp_path: Path) -> None:
    snaps = series(10, 2, links=4)
    record(tmp_path / "r", snaps)
    assert read_recording(tmp_path / "r").snapshots == snaps
    rec = to_record(snaps[0])
    round_to_sensor(rec)
    assert rec == to_record(snaps[0])


# -- the command line ------------------------------------------------------------------------------


def run_gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop", *args], capture_output=True,
                          text=True, timeout=120)


def test_record_max_size_and_keep_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "run.gputop"
    r = run_gputop("--demo", "--record", str(path), "--headless", "--count", "80",
               "--interval", "0.001", "--record-max-size", "24k", "--record-keep", "3")
    assert r.returncode == 0, r.stderr
    assert "80 snapshots, " in r.stderr and f"bytes in 3 files, {path}." in r.stderr
    files = segment_paths(path)
    assert len(files) == 3 and all(f.stat().st_size <= 24 * 1024 for f in files)
    snaps = read_recording(path).snapshots
    assert 0 < len(snaps) < 80
    assert one_second_apart(snaps)  # none missing in between


@pytest.mark.parametrize("args, message", [
    (["--record-max-size", "lots"], "not a size"),
    (["--record-max-size", "0"], "must be greater than 0"),
    (["--record-max-size", "1G"], "--record-max-size needs --record"),
    (["--record", "x", "--record-keep", "2"], "--record-keep needs --record-max-size"),
    (["--record", "x", "--record-max-size", "1G", "--record-keep", "0"], "at least 1"),
])
def test_bad_sizes_are_one_line(args: list[str], message: str) -> None:
    r = run_gputop(*args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
