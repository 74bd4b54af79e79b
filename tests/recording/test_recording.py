"""A recording keeps what it captured: through SIGKILL, truncation, corruption and a full disk."""

from __future__ import annotations

import dataclasses
import errno
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.errors import RecordingError
from gputop.model import Missing, XidEvent
from gputop.recording import (
    FOOTER_SIZE,
    RecordingReader,
    RecordingWriter,
    apply,
    diff,
    read_recording,
)
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import node, series


def write(path: Path, snaps, **kw) -> RecordingWriter:
    with RecordingWriter(path, **kw, summarizer=SummaryKeeper()) as w:
        for s in snaps:
            w.write(s)
    return w


def test_snapshots_read_back_exactly(tmp_path: Path) -> None:
    snaps = series(20, 4, fan=Missing("unsupported"))
    write(tmp_path / "run.gputop", snaps, keyframe_every=7)
    result = read_recording(tmp_path / "run.gputop")
    assert result.warning is None
    assert result.snapshots == snaps
    assert result.header["format"] == "gputop-recording"
    assert result.header["version"] == 1


def test_a_recording_is_a_gzip_of_json_lines_other_tools_can_read(tmp_path: Path) -> None:
    write(tmp_path / "run.gputop", series(3))
    lines = gzip.decompress((tmp_path / "run.gputop").read_bytes()).decode().splitlines()
    assert lines[0].startswith('{"type":"header"')
    assert lines[1].startswith('{"k":')  # a full snapshot
    assert lines[2].startswith('{"d":')  # then only what changed


def test_merge_patch_round_trip() -> None:
    a = {"x": 1, "y": {"z": 2, "w": 3}, "gone": 5}
    b = {"x": 1, "y": {"z": 4, "w": 3}, "new": [1, 2]}
    assert apply(a, diff(a, b)) == b
    assert diff(a, b) == {"y": {"z": 4}, "gone": None, "new": [1, 2]}


def test_a_process_that_comes_and_goes_is_recorded(tmp_path: Path) -> None:
    snaps = [node(2), node(2, processes=False, time=1_800_000_001.0), node(2, time=1_800_000_002.0)]
    write(tmp_path / "r", snaps)
    assert [len(s.processes) for s in read_recording(tmp_path / "r").snapshots] == [2, 0, 2]


def test_fields_back_to_their_record_default_read_back(tmp_path: Path) -> None:
    # Left out of the record while at their default (no Xids): a patch takes them out again.
    snaps = []
    for t, xids in enumerate(((), (XidEvent(xid=79, time=1_800_000_001.0),), (), ())):
        s = node(1, time=1_800_000_000.0 + t)
        snaps.append(dataclasses.replace(s, devices=tuple(
            dataclasses.replace(d, xids=xids, xid_count=len(xids)) for d in s.devices)))
    write(tmp_path / "r", snaps)
    result = read_recording(tmp_path / "r")
    assert result.warning is None
    assert result.snapshots == snaps


WRITER = """
import sys, time
from gputop.recording import RecordingWriter
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series
w = RecordingWriter(sys.argv[1], summarizer=SummaryKeeper())
for i, s in enumerate(series(10_000, 8)):
    w.write(s)
    print(i + 1, flush=True)
    time.sleep(0.01)
"""


def test_sigkill_loses_at_most_the_tick_being_written(tmp_path: Path) -> None:
    path = tmp_path / "killed.gputop"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    done = 0
    while done < 25:
        done = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    r = RecordingReader(path)
    snaps = list(r)
    assert len(snaps) >= done - 1
    assert snaps == series(len(snaps), 8)
    assert r.warning is not None and "end marker" in r.warning


def test_a_truncated_file_reads_up_to_the_cut_with_a_warning(tmp_path: Path) -> None:
    full = tmp_path / "full"
    snaps = series(40, 4)
    write(full, snaps)
    data = full.read_bytes()
    ticks_end = json.loads(gzip.decompress(data[-FOOTER_SIZE:]))["summary_at"]  # the summary
    for cut in (len(data) - 3, ticks_end - 3, ticks_end * 3 // 4, ticks_end * 2 // 3):
        part = tmp_path / f"cut{cut}"
        part.write_bytes(data[:cut])
        result = read_recording(part)
        assert result.warning
        assert 0 < len(result.snapshots) <= 40
        assert result.snapshots == snaps[: len(result.snapshots)]
        if cut < ticks_end - 100:
            assert len(result.snapshots) < 40


def test_a_corrupted_file_reads_up_to_the_damage(tmp_path: Path) -> None:
    path = tmp_path / "bad"
    snaps = series(60, 4)
    write(path, snaps)
    data = bytearray(path.read_bytes())
    middle = json.loads(gzip.decompress(data[-FOOTER_SIZE:]))["summary_at"] // 2  # in the ticks
    data[middle:middle + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    result = read_recording(path)
    assert result.warning and "damage" in result.warning
    assert 0 < len(result.snapshots) < 60
    assert result.snapshots == snaps[: len(result.snapshots)]


@pytest.mark.parametrize("where", [1 / 3, 1 / 2, 2 / 3, 3 / 4])
def test_damage_in_the_ticks_is_said_as_damage_not_as_a_cut_short_file(
        tmp_path: Path, where: float) -> None:
    """Inflating stops at the damage, most often in the middle of a tick: the warning says the
    file is damaged, not that it ends there."""
    path = tmp_path / "bad"
    snaps = series(60, 4)
    write(path, snaps)
    data = bytearray(path.read_bytes())
    at = int(json.loads(gzip.decompress(data[-FOOTER_SIZE:]))["summary_at"] * where)
    data[at:at + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    result = read_recording(path)
    assert result.warning and "middle of a tick" not in result.warning
    assert "damage" in result.warning or "checksum" in result.warning
    assert result.snapshots == snaps[: len(result.snapshots)]


@pytest.mark.parametrize("content, message", [
    (b"hello, I am a text file\n", "not a gputop recording"),
    (gzip.compress(b'{"some": "json"}\n'), "not a gputop recording"),
    (gzip.compress(b'{"type":"header","format":"gputop-recording","version":99}\n'),
     "version 99"),
    (b"", "not a gputop recording"),
    (b"\x1f\x8b", "empty or damaged"),
])
def test_a_file_of_the_wrong_kind_gets_a_one_line_error(tmp_path: Path, content: bytes,
                                                        message: str) -> None:
    path = tmp_path / "x"
    path.write_bytes(content)
    with pytest.raises(RecordingError) as e:
        read_recording(path)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_recording_never_overwrites_a_file(tmp_path: Path) -> None:
    (tmp_path / "exists").write_text("precious")
    with pytest.raises(RecordingError, match="already exists"):
        RecordingWriter(tmp_path / "exists", summarizer=SummaryKeeper())
    assert (tmp_path / "exists").read_text() == "precious"


def test_a_full_disk_stops_recording_and_keeps_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "full-disk"
    w = RecordingWriter(path, summarizer=SummaryKeeper())
    snaps = series(5)
    for s in snaps[:3]:
        w.write(s)
    real = w._f

    class FullDisk:
        closed = False

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self) -> None: ...

        def truncate(self, size: int) -> int:
            return real.truncate(size)

        def close(self) -> None:
            self.closed = True
            real.close()

    w._f = FullDisk()  # type: ignore[assignment]
    with pytest.raises(RecordingError) as e:
        w.write(snaps[3])
    assert "No space left on device" in str(e.value)
    assert "3 ticks written before are kept" in str(e.value)
    w.close()
    assert read_recording(path).snapshots == snaps[:3]


def test_a_reader_follows_a_file_still_being_written(tmp_path: Path) -> None:
    path = tmp_path / "growing"
    w = RecordingWriter(path, summarizer=SummaryKeeper())
    for s in series(5):
        w.write(s)
    assert len(read_recording(path).snapshots) == 5  # readable while open
    w.write(series(6)[5])
    assert len(read_recording(path).snapshots) == 6
    w.close()
    assert read_recording(path).warning is None


def test_size_per_gpu_day_is_small(tmp_path: Path) -> None:
    """The aim is <= 5 MB per GPU-day at 1 Hz; an hour of 8 GPUs here must stay well under."""
    snaps = series(600, 8, links=18)
    start = time.perf_counter()
    w = write(tmp_path / "size", snaps)
    assert time.perf_counter() - start < 60  # sanity, not a benchmark (see bench/)
    per_gpu_day = w.bytes_written / 8 * (86400 / 600)
    assert per_gpu_day < 5e6


def test_links_handed_again_unchanged_and_then_changed_read_back_as_written(
        tmp_path: Path) -> None:
    # The NVML source hands the same link objects between its slow ticks; the writer reuses
    # their shapes then, and must still write each new value when they change.
    import dataclasses

    first = node(2, links=4, time=1000.0)
    same = dataclasses.replace(first, time=1001.0)  # the very same link objects
    changed = dataclasses.replace(first, time=1002.0, links=tuple(
        dataclasses.replace(lk, rx=1.5e9, tx=Missing("pending")) for lk in first.links))
    again = dataclasses.replace(changed, time=1003.0)
    snaps = [first, same, changed, again]
    write(tmp_path / "run.gputop", snaps)
    got = read_recording(tmp_path / "run.gputop").snapshots
    assert [s.links for s in got] == [s.links for s in snaps]
    assert got[2].links[0].rx == 1.5e9 and got[3].links[0].tx == Missing("pending")


def test_items_handed_again_keep_their_keys_and_write_no_patch(tmp_path: Path) -> None:
    """A source hands the very same link objects between its slow ticks; the writer then reuses
    their dicts and keys. Links that change, move or go away are written as any other."""
    import dataclasses

    from gputop.model import DictMemo
    from gputop.recording.format import diff, to_record

    first = node(2, links=3, time=1_800_000_000.0)
    same = dataclasses.replace(first, time=first.time + 1)  # every link object handed again
    moved = dataclasses.replace(same, time=same.time + 1, links=(
        dataclasses.replace(first.links[0], rx=1.0e9),  # a new rate
        *first.links[1:3],
        dataclasses.replace(first.links[3], device_index=1, link=7),  # another link now
        *first.links[4:5]))  # the last one is gone
    memo, keys = DictMemo(), {}
    recs = []
    for snap in (first, same, moved):
        recs.append(to_record(snap, memo, keys))
        memo.next_tick()
        assert recs[-1] == to_record(snap)

    assert recs[1]["links"]["0:0"] is recs[0]["links"]["0:0"]
    assert "links" not in diff(recs[0], recs[1])
    assert diff(recs[1], recs[2])["links"] == {"0:0": {"rx": 1.0e9}, "1:0": None, "1:2": None,
                                               "1:7": to_record(moved)["links"]["1:7"]}
    path = tmp_path / "r.gputop"
    with RecordingWriter(path) as w:
        for snap in (first, same, moved):
            w.write(snap)
    back = read_recording(path).snapshots
    assert back[:2] == [first, same]
    # A link added by a patch is read after those it had (merge patch order).
    assert dataclasses.replace(back[2], links=()) == dataclasses.replace(moved, links=())
    assert sorted(back[2].links, key=str) == sorted(moved.links, key=str)
