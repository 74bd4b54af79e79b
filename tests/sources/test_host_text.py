"""Text the host gives gputop (process names and arguments, environments, probe files) is any
bytes a user chose: it reaches the table, JSON, recordings and metrics as valid, bounded text,
and what gputop refused is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import gputop.probe as gp
import gputop.sources.probe_files as pr
from gputop.export.prometheus import ExportState, exposition, families, process_labels
from gputop.model import JobInfo, ProcessSample, Snapshot
from gputop.recording import RecordingWriter, read_recording
from gputop.sources.base import GpuTick, SourceInfo
from gputop.sources.host import HostSource, parse_environ
from gputop.sources.poller import Poller
from gputop.testing.synthetic import node
from gputop.ui.view.table import render

SLEEP_CODE = b"import time; time.sleep(600)"


@pytest.fixture()
def latin1_process() -> Iterator[int]:
    """A process any user can start: argv[0] the byte 0xff, then a Latin-1 file name."""
    p = subprocess.Popen([b"\xff", b"-c", SLEEP_CODE, b"caf\xe9.txt"], executable=sys.executable)
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def snapshot_with(processes: list[ProcessSample]) -> Snapshot:
    base = node(1, processes=False, time=time.time())
    return Snapshot(time=base.time, system=base.system, host=base.host, devices=base.devices,
                    processes=tuple(processes))


def test_a_process_whose_arguments_are_not_utf8_is_shown_recorded_served_and_printed(
        latin1_process: int, tmp_path: Path) -> None:
    (p,) = HostSource().enrich([ProcessSample(pid=latin1_process, device_index=0)], time.time())
    assert p.cmdline == ("\\xff", "-c", SLEEP_CODE.decode(), "caf\\xe9.txt")  # bytes, visible
    snap = snapshot_with([p])

    assert "caf\\xe9.txt" in render(snap).encode("utf-8").decode()
    doc = json.dumps(snap.to_dict(), ensure_ascii=False).encode("utf-8")
    assert json.loads(doc)["processes"][0]["cmdline"][0] == "\\xff"
    with RecordingWriter(tmp_path / "run.gputop") as w:
        for _ in range(3):
            w.write(snap)
    back = read_recording(tmp_path / "run.gputop").snapshots
    assert len(back) == 3 and back[-1].processes[0].cmdline == p.cmdline
    state = ExportState(snapshot=snap, polled_at=snap.time, ok=True)
    exposition(families(state, snap.time)).decode("utf-8")


def test_undecodable_text_from_elsewhere_is_still_recorded(tmp_path: Path) -> None:
    """A snapshot that holds a lone surrogate (text decoded with surrogateescape by code other
    than the host source) is written with the byte escaped, never dropped."""
    evil = ProcessSample(pid=4242, device_index=0, name="x\udcff", cmdline=("x\udcff", "-v"))
    with RecordingWriter(tmp_path / "run.gputop") as w:
        w.write(snapshot_with([evil]))
    (snap,) = read_recording(tmp_path / "run.gputop").snapshots
    assert snap.processes[0].cmdline == ("x\\xff", "-v")


def test_a_100_kb_pod_name_is_bounded_everywhere() -> None:
    env = parse_environ(b"POD_NAME=" + b"p" * 100_000 + b"\0POD_NAMESPACE=ml\0")
    assert len(env["POD_NAME"]) == 253 and env["POD_NAME"].endswith("…")
    assert env["POD_NAMESPACE"] == "ml"
    # An older gputop recorded it whole: the table and the labels still bound it.
    proc = ProcessSample(pid=7, device_index=0, name="python3", user="ada",
                         job=JobInfo(pod_name="p" * 100_000, pod_namespace="n" * 100_000))
    snap = snapshot_with([proc])
    assert max(len(line) for line in render(snap).splitlines()) < 200
    labels = process_labels(proc, "GPU-1", {"Hostname": "node"})
    assert len(labels["pod"]) <= 253 and len(labels["namespace"]) <= 253
    body = exposition(families(ExportState(snapshot=snap, polled_at=snap.time, ok=True),
                               snap.time)).decode()
    assert max(len(line) for line in body.splitlines()) < 1000


class OneProcessSource:
    """A GPU source with one process on GPU 0: this test's own."""

    def open(self) -> SourceInfo:
        return SourceInfo(backend="nvml")

    def poll(self, now: float) -> GpuTick:
        base = node(1, processes=False, time=now)
        return GpuTick(devices=list(base.devices),
                       processes=[ProcessSample(pid=os.getpid(), device_index=0)])

    def close(self) -> None:
        pass


def test_a_rejected_probe_file_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/probe.md: a file that fails is skipped with a note. The note reaches the snapshot's
    warnings (the table's `!` lines, the dashboard's warning bar, JSON, recordings)."""
    xdg = tmp_path / "xdg"
    (xdg / "gputop").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setattr(gp, "TMP_ROOT", str(tmp_path / "tmp"))
    monkeypatch.setattr(pr, "RUN_USER_ROOT", str(tmp_path / "run"))
    (tmp_path / "elsewhere.json").write_text("{}")
    (xdg / "gputop" / f"{os.getpid()}.json").symlink_to(tmp_path / "elsewhere.json")
    poller = Poller([OneProcessSource()], HostSource())  # type: ignore[list-item]
    poller.open()
    snap = poller.poll_once()
    notes = [w for w in snap.warnings if "probe file" in w]
    assert len(notes) == 1 and "is a symlink" in notes[0]
    assert f"! {notes[0]}" in render(snap)


if sys.platform != "linux":  # /proc and argv bytes are Linux's
    pytestmark = pytest.mark.skip("Linux only")
