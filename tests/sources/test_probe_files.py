"""The host source reads the probe file of each visible GPU process into ProcessSample.probe."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import gputop.probe as gp
import gputop.sources.probe_files as pr
from gputop.model import ProbeStats, ProcessSample
from gputop.sources.host import HostSource

ME = os.getpid()
GIB = 1 << 30
HOST_ONLY_PID = 4_194_400  # above PID_MAX_LIMIT: not in this PID namespace


@pytest.fixture
def probe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$XDG_RUNTIME_DIR/gputop under tmp_path; /run/user and /tmp moved aside."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setattr(gp, "TMP_ROOT", str(tmp_path / "tmp"))
    monkeypatch.setattr(pr, "RUN_USER_ROOT", str(tmp_path / "run"))
    return xdg / "gputop"


def payload(now: float, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "v": gp.SCHEMA_VERSION, "ts": now - 0.5, "pid": ME, "device": 0,
        "uuid": "GPU-58e4b2c6-8a5e-1c1f-3d6b-0123456789ab",
        "allocated": 37 * GIB, "reserved": 42 * GIB, "active": 37 * GIB,
        "inactive_split": GIB, "num_alloc_retries": 1, "num_ooms": 0,
        "peak_allocated": 40 * GIB, "peak_reserved": 43 * GIB,
        "allocator_conf": "expandable_segments:True", "steps": 120, "step_time_s": 0.033,
        "loader_wait_s": 0.8, "wait_frac": 0.476, "recent_wait_frac": 0.02,
        "batch_sizes": [[88, 40 * GIB], [96, 43 * GIB]], "torch": "2.13.0+cu130",
    }
    doc.update(over)
    return doc


def put(directory: Path, body: bytes) -> None:
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"{ME}.json"
    path.write_bytes(body)
    os.chmod(path, 0o600)


def enrich(source: HostSource, now: float, *pids: int) -> list[ProcessSample]:
    return source.enrich([ProcessSample(pid=p, device_index=0, gpu_mem=43 * GIB) for p in pids],
                         now)


def test_a_valid_probe_file_fills_the_process_probe(probe_dir: Path) -> None:
    now = time.time()
    put(probe_dir, json.dumps(payload(now)).encode())
    source = HostSource()
    (p,) = enrich(source, now, ME)
    assert isinstance(p.probe, ProbeStats)
    assert p.probe.ts == pytest.approx(now - 0.5)
    assert (p.probe.allocated, p.probe.peak_reserved) == (37 * GIB, 43 * GIB)
    assert (p.probe.num_alloc_retries, p.probe.allocator_conf) == (1, "expandable_segments:True")
    assert (p.probe.steps, p.probe.wait_frac, p.probe.recent_wait_frac) == (120, 0.476, 0.02)
    assert p.probe.batch_sizes == ((88, 40 * GIB), (96, 43 * GIB))
    assert source.probe_notes == []


def test_a_process_on_two_gpus_gets_the_same_probe_on_both(probe_dir: Path) -> None:
    now = time.time()
    put(probe_dir, json.dumps(payload(now)).encode())
    a, b = HostSource().enrich([ProcessSample(pid=ME, device_index=0),
                                ProcessSample(pid=ME, device_index=1)], now)
    assert a.probe is not None and a.probe == b.probe


@pytest.mark.parametrize("body", [
    b"{not json",
    json.dumps({"v": 1}).encode(),
    b"[" * 100_000,
])
def test_a_hostile_file_leaves_no_probe_and_no_exception(probe_dir: Path, body: bytes) -> None:
    now = time.time()
    put(probe_dir, body)
    source = HostSource()
    (p,) = enrich(source, now, ME)
    assert p.probe is None
    assert p.name is not None  # the rest of the host facts are still there
    assert source.probe_notes and "ignored" in source.probe_notes[0]


def test_a_stale_file_or_no_directory_gives_no_probe(probe_dir: Path) -> None:
    now = time.time()
    source = HostSource()
    (p,) = enrich(source, now, ME)  # no probe directory at all
    assert p.probe is None and source.probe_notes == []
    put(probe_dir, json.dumps(payload(now - 60)).encode())
    (p,) = enrich(source, now, ME)
    assert p.probe is None


def test_a_process_outside_our_pid_namespace_is_not_looked_up(probe_dir: Path) -> None:
    now = time.time()
    put(probe_dir, json.dumps(payload(now)).encode())
    (p,) = enrich(HostSource(), now, HOST_ONLY_PID)
    assert p.probe is None


def test_a_reader_failure_never_stops_the_tick(probe_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import gputop.sources.host as host

    def broken(*_: Any, **__: Any) -> dict[int, Any]:
        raise OSError("disk on fire")

    monkeypatch.setattr(host, "read_probes", broken)
    now = time.time()
    put(probe_dir, json.dumps(payload(now)).encode())
    source = HostSource()
    (p,) = enrich(source, now, ME)
    assert p.probe is None and "disk on fire" in source.probe_notes[0]


def test_each_probe_directory_is_listed_once_and_only_published_files_are_opened(
        probe_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    put(probe_dir, json.dumps(payload(now)).encode())
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: Any, flags: int, *args: Any) -> int:
        opened.append(str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(pr.os, "open", counting_open)
    others = {pid: os.getuid() for pid in range(4_194_401, 4_194_411)}  # publish nothing

    got = pr.read_probes({ME: os.getuid(), **others}, now)

    assert list(got) == [ME] and got[ME].allocated == 37 * GIB
    assert opened == [str(probe_dir / f"{ME}.json")]
