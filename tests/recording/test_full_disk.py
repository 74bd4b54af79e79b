"""A full disk stops a recording but keeps every tick written before it, while the dashboard goes
on (and says so) or headless gputop exits with one line; SIGKILL loses at most the tick being
written, in one file or across segments."""

from __future__ import annotations

import errno
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import gputop.recording.writer
from gputop.commands.main import main
from gputop.errors import RecordingError
from gputop.feeds.diagnosed import with_diagnostics
from gputop.feeds.playback import RecordingFeed
from gputop.feeds.tee import RecordingTee
from gputop.recording import RecordingWriter, read_recording, segment_paths
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series

SNAPS = series(120, 4)
SEG = 1500  # bytes: a few files for SNAPS


def evenly_apart(snaps: list[Any], interval: float) -> bool:
    """The demo's ticks are `interval` apart as recorded (it plays on the wall clock, a tick
    an interval): a longer gap is a lost tick."""
    return all(b.time - a.time == pytest.approx(interval, rel=0.25)
               for a, b in itertools.pairwise(snaps))


# -- a full disk: the writer, the dashboard, headless ----------------------------------------------


class Disk:
    """Files the writer creates, on a disk that fills up when told to (or after `room` bytes):
    a write then stores what fits and fails with ENOSPC, as write(2) does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, room: int | None = None) -> None:
        self.room = room
        self.full = False
        real_open = open

        def fake_open(path: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
            f = real_open(path, mode, *args, **kw)
            return FillingFile(f, self) if "x" in mode else f

        monkeypatch.setattr(gputop.recording.writer, "open", fake_open, raising=False)


class FillingFile:
    def __init__(self, f: Any, disk: Disk) -> None:
        self._f = f
        self._disk = disk

    def write(self, data: bytes) -> int:
        disk = self._disk
        room = 0 if disk.full else disk.room
        if room is not None and len(data) > room:
            self._f.write(data[:room])
            self._f.flush()
            disk.room, disk.full = 0, True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if disk.room is not None:
            disk.room -= len(data)
        return self._f.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def test_a_full_disk_keeps_every_tick_written_before(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.gputop"
    Disk(monkeypatch, room=2000)
    w = RecordingWriter(path, summarizer=SummaryKeeper())
    with pytest.raises(RecordingError, match="No space left on device"):
        for s in SNAPS:
            w.write(s)
    w.close()
    result = read_recording(path)
    assert result.snapshots == SNAPS[:w.ticks]
    assert w.ticks > 10
    assert result.warning  # the tick being written when the disk filled is dropped
    with pytest.raises(RecordingError, match="stopped after a write error"):
        w.write(SNAPS[0])


def test_a_disk_full_as_the_next_file_begins_keeps_the_files_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.gputop"
    disk = Disk(monkeypatch)
    w = RecordingWriter(path, max_bytes=SEG, summarizer=SummaryKeeper())
    with pytest.raises(RecordingError, match="No space left on device"):
        for s in SNAPS:
            if len(w.segments) == 3:
                disk.full = True
            w.write(s)
    w.close()
    assert read_recording(path).snapshots == SNAPS[:w.ticks]


async def test_the_dashboard_says_recording_stopped_and_monitoring_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop.ui.app import GputopApp

    path = tmp_path / "run.gputop"
    disk = Disk(monkeypatch)
    writer = RecordingWriter(path, summarizer=SummaryKeeper())
    tee = RecordingTee(RecordingFeed(series(30, 4)), writer)
    feed = with_diagnostics(tee)  # as `gputop --record` composes them
    app = GputopApp(feed, interval=0.01)
    feed.listener = app.set_findings
    async with app.run_test(size=(120, 40)) as pilot:
        while writer.ticks < 5:
            await pilot.pause(0.01)
        disk.full = True
        while tee.error is None:
            await pilot.pause(0.01)
        await pilot.pause(0.05)
        shown = app.dashboard.warnings
        assert shown.has_class("-shown")
        assert any("recording stopped" in w and "No space left on device" in w
                   for w in shown.warnings)
        before = app.snapshot.time
        await pilot.pause(0.1)
        assert app.snapshot.time != before  # still monitoring
    feed.close()
    writer.close()
    recorded = read_recording(path).snapshots
    assert len(recorded) == writer.ticks >= 5
    # The ticks the feed played, each written once, in time order (the demo skips a tick whose
    # deadline passed while the app was busy, as a live poll would miss it).
    played = [s.devices for s in series(30, 4)]
    assert all(s.devices in played for s in recorded)
    assert all(a.time < b.time for a, b in itertools.pairwise(recorded))


def test_headless_recording_on_a_full_disk_exits_non_zero_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.gputop"
    Disk(monkeypatch, room=60_000)
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # leave pytest's SIGTERM alone
    rc = main(["--demo", "--record", str(path), "--headless", "--interval", "0.001",
               "--count", "200"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 1
    assert len(err) == 2 and err[0].startswith("gputop: recording to")
    assert err[1].startswith(f"gputop: cannot write {path}: No space left on device")
    assert "ticks written before are kept" in err[1]
    assert 5 < len(read_recording(path).snapshots) < 200


# -- SIGKILL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("rotate", [False, True])
def test_sigkill_of_gputop_record_loses_at_most_the_tick_being_written(
        tmp_path: Path, rotate: bool) -> None:
    path = tmp_path / "killed.gputop"
    args = ["--record-max-size", "24k"] if rotate else []
    proc = subprocess.Popen([sys.executable, "-m", "gputop", "--demo", "--record", str(path),
                             "--headless", "--interval", "0.01", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        seen = 0
        while seen < (40 if rotate else 20) and time.monotonic() < deadline:
            time.sleep(0.05)
            if path.exists():
                try:
                    seen = len(read_recording(path).snapshots)
                except RecordingError:
                    pass  # not even the header yet
        assert seen > 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    result = read_recording(path)
    snaps = result.snapshots
    assert len(snaps) >= seen  # every tick seen before the kill is still there
    assert evenly_apart(snaps, 0.01)  # none missing in between
    assert len(segment_paths(path)) > 1 if rotate else len(segment_paths(path)) == 1
    last = segment_paths(path)[-1]
    assert result.warning is None or str(last) in result.warning


# -- a disk that refuses a write at the OS level (RLIMIT_FSIZE: write(2) fails with EFBIG) ------

_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (60000, 60000))
from gputop.commands import main
if sys.argv[1] == "dashboard":
    from gputop.ui import app

    def run(self, **kw):  # the dashboard pulls ticks past the full disk, then q is pressed
        for _ in range(300):
            self.feed.poll_once()

    app.GputopApp.run = run
    sys.stdout.isatty = sys.stdin.isatty = lambda: True  # main() runs the dashboard
sys.exit(main.main(sys.argv[2:]))
"""


def _limited(tmp_path: Path, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _LIMITED, mode, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mode", ["headless", "dashboard"])
def test_a_file_the_os_refuses_to_grow_ends_in_one_line_keeping_the_ticks(
        tmp_path: Path, mode: str) -> None:
    args = ["--demo", "--record", "run.gputop", "--interval", "0.001"]
    if mode == "headless":
        args += ["--headless", "--count", "300"]
    done = _limited(tmp_path, mode, *args)
    err = [line for line in done.stderr.splitlines() if not line.startswith("gputop: recording")]
    assert done.returncode == 1, done.stderr
    assert err == [f"gputop: cannot write run.gputop: File too large: the {err[0].split()[-6]} "
                   "ticks written before are kept"], done.stderr
    kept = int(err[0].split()[-6])
    result = read_recording(tmp_path / "run.gputop")
    assert len(result.snapshots) == kept > 5
    assert evenly_apart(result.snapshots, 0.001)
    assert "in the middle of a tick" not in (result.warning or "")  # cut back to a whole tick
