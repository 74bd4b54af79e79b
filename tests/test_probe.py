"""The in-process probe as a training script meets it (wrap, step, the -m runner) and as the
monitor meets its files: only the process owner's own, well-formed, fresh files are believed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import gputop.probe as gp
import gputop.sources.probe_files as pr
from gputop.probe import Probe, batch_size_of
from gputop.sources.probe_files import ProbeSample, parse_payload, read_probes

GIB = 1 << 30


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Private runtime directories under tmp_path, in place of /run/user and /tmp."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setattr(gp, "TMP_ROOT", str(tmp_path / "tmp"))
    monkeypatch.setattr(pr, "RUN_USER_ROOT", str(tmp_path / "run"))
    (tmp_path / "tmp").mkdir()
    return SimpleNamespace(xdg=xdg, probe=xdg / "gputop", tmp=tmp_path / "tmp")


def slow_loader(n: int, delay: float = 0.02) -> Iterator[list[int]]:
    for i in range(n):
        time.sleep(delay)
        yield [i] * 8


class FakeCuda:
    """torch.cuda as the probe uses it, with an allocator whose peak grows with the batch."""

    def __init__(self) -> None:
        self.peak = 0
        self.current = 2 * GIB
        self.reset_threads: set[int] = set()

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def get_device_properties(self, device: int) -> Any:
        return SimpleNamespace(uuid="58e4b2c6-8a5e-1c1f-3d6b-0123456789ab")

    def allocate(self, nbytes: int) -> None:
        self.peak = max(self.peak, self.current + nbytes)

    def memory_stats(self, device: int) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": self.current,
            "allocated_bytes.all.peak": max(self.peak, self.current),
            "reserved_bytes.all.current": 3 * GIB,
            "reserved_bytes.all.peak": max(self.peak, self.current) + GIB,
            "active_bytes.all.current": self.current,
            "inactive_split_bytes.all.current": 64 << 20,
            "num_alloc_retries": 1,
            "num_ooms": 0,
        }

    def reset_peak_memory_stats(self, device: int) -> None:
        self.reset_threads.add(threading.get_ident())
        self.peak = 0


# ----------------------------------------------------------------------------------------------
# the training side


def test_importing_the_probe_pulls_in_neither_torch_nor_textual() -> None:
    code = ("import sys, gputop.probe, gputop.sources.probe_files\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'textual')])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_a_slow_loader_shows_as_waiting_most_of_the_step() -> None:
    probe = Probe()
    for _batch in probe.wrap(slow_loader(15)):
        pass  # the step itself takes ~0
    snap = probe.snapshot()
    assert snap["steps"] == 15
    assert snap["wait_frac"] > 0.5
    assert snap["loader_wait_s"] >= 15 * 0.02 * 0.95  # sleeps only ever run long
    assert 0.019 <= snap["step_time_s"] < 0.2


def test_a_fast_loader_and_a_slow_step_show_little_waiting() -> None:
    probe = Probe()
    for _batch in probe.wrap(slow_loader(10, delay=0.0)):
        time.sleep(0.01)
        probe.step()
    snap = probe.snapshot()
    assert snap["steps"] == 10
    assert snap["wait_frac"] < 0.1


class FakeClock:
    """perf_counter for the probe, moved on by the loop itself: steps of seconds, run in no time."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def loader(self, waits: list[float]) -> Iterator[int]:
        for i, wait in enumerate(waits):
            self.now += wait
            yield i


def run_loop(monkeypatch: pytest.MonkeyPatch, waits: list[float],
             step_s: float = 0.8) -> dict[str, Any]:
    """The probe's payload after a loop whose i-th batch takes waits[i] to arrive and whose
    steps compute for `step_s`."""
    clock = FakeClock()
    monkeypatch.setattr(gp, "_clock", clock)
    probe = Probe()
    for _batch in probe.wrap(clock.loader(waits)):
        clock.now += step_s
        probe.step()
    return probe.snapshot()


def test_the_recent_share_sees_the_loader_catch_up_while_the_50_step_share_trails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stalled = run_loop(monkeypatch, [1.0] * 30)
    assert stalled["wait_frac"] == pytest.approx(1.0 / 1.8)
    assert stalled["recent_wait_frac"] == pytest.approx(1.0 / 1.8)
    # 7 fast steps after the stall: the newest 5 cover 4.05 s, and it takes 7 to make 5 s
    caught_up = run_loop(monkeypatch, [1.0] * 30 + [0.01] * 7)
    assert caught_up["recent_wait_frac"] == pytest.approx(0.01 / 0.81)
    assert caught_up["wait_frac"] > 0.45  # 30 of its 37 steps waited a second
    # one fast step is not yet enough: the last few still hold four of the stall's
    one = run_loop(monkeypatch, [1.0] * 30 + [0.01])
    assert one["recent_wait_frac"] == pytest.approx((4 * 1.0 + 0.01) / (4 * 1.8 + 0.81))


def test_the_recent_share_covers_5_steps_and_5_seconds_whichever_is_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # fast steps (0.1 s): 5 s takes 50 steps, all the probe keeps, so it is the 50-step share
    fast = run_loop(monkeypatch, [0.05] * 10 + [0.0] * 50, step_s=0.1)
    assert fast["recent_wait_frac"] == fast["wait_frac"] == 0.0
    fast = run_loop(monkeypatch, [0.0] * 45 + [0.05] * 5, step_s=0.09)  # 4.75 s in all
    assert fast["recent_wait_frac"] == pytest.approx(fast["wait_frac"])
    # slow steps (3 s): 5 steps cover more than 5 s
    slow = run_loop(monkeypatch, [3.0] * 10 + [0.0] * 5, step_s=3.0)
    assert slow["recent_wait_frac"] == 0.0 and slow["wait_frac"] > 0.3
    # fewer steps than either: all of them
    young = run_loop(monkeypatch, [1.0, 0.0], step_s=1.0)
    assert young["recent_wait_frac"] == young["wait_frac"] == pytest.approx(1 / 3)
    assert run_loop(monkeypatch, [])["recent_wait_frac"] is None


def test_a_stall_in_progress_counts_in_the_recent_share() -> None:
    steps = [(0.81, 0.01)] * 10
    assert gp.recent_wait_frac(steps) == pytest.approx(0.01 / 0.81)
    assert gp.recent_wait_frac(steps, stalled=5.0) == pytest.approx(5.07 / 10.67)
    assert gp.recent_wait_frac([], stalled=2.0) == 1.0


def test_a_stall_in_progress_counts_before_the_batch_arrives() -> None:
    probe = Probe()
    it = iter(probe.wrap(slow_loader(3, delay=0.3)))
    next(it)
    t = threading.Thread(target=next, args=(it,))
    t.start()
    time.sleep(0.15)
    assert probe.snapshot()["loader_wait_s"] > 0.4  # the first fetch plus the one still blocked
    t.join()


class Loader:
    def __init__(self, items: list[int]) -> None:
        self.dataset = items

    def __iter__(self) -> Iterator[int]:
        return iter(self.dataset)

    def __len__(self) -> int:
        return len(self.dataset)


def test_wrap_keeps_the_loader_usable() -> None:
    wrapped = Probe().wrap(Loader([1, 2, 3]))
    assert len(wrapped) == 3  # progress bars ask
    assert wrapped.dataset == [1, 2, 3]
    assert list(wrapped) == [1, 2, 3]
    assert list(wrapped) == [1, 2, 3]  # a second epoch


def test_batch_size_comes_from_the_first_tensor_not_the_tuple() -> None:
    x = SimpleNamespace(shape=(32, 128))
    assert batch_size_of((x, SimpleNamespace(shape=(32,)))) == 32  # len() would say 2
    assert batch_size_of({"input_ids": x, "labels": x}) == 32
    assert batch_size_of([1, 2, 3]) == 3
    assert batch_size_of(object()) is None


def test_step_peaks_are_read_and_reset_on_the_training_thread() -> None:
    cuda = FakeCuda()
    probe = Probe(torch_module=SimpleNamespace(cuda=cuda, __version__="2.13.0"))
    probe._attach_torch()
    for b in [4, 4, 8, 8, 16, 16, 4, 8]:
        probe._last_peak = float("-inf")  # every step is due for a read in this test
        cuda.allocate(b * GIB)
        probe.step(batch_size=b)
    assert cuda.reset_threads == {threading.get_ident()}
    snap = probe.snapshot()
    assert snap["device"] == 0
    assert snap["uuid"] == "GPU-58e4b2c6-8a5e-1c1f-3d6b-0123456789ab"
    assert snap["allocated"] == 2 * GIB and snap["reserved"] == 3 * GIB
    assert snap["inactive_split"] == 64 << 20 and snap["num_alloc_retries"] == 1
    assert snap["peak_allocated"] == 18 * GIB  # the biggest step since the last publish
    assert snap["peak_reserved"] == 19 * GIB
    # warm-up steps are not fitted; each pair is one step's own peak
    assert snap["batch_sizes"] == [[b, (2 + b) * GIB] for b in [8, 8, 16, 16, 4, 8]]
    assert probe.snapshot()["peak_allocated"] == 2 * GIB  # the window restarted


def test_fast_steps_read_memory_stats_only_a_few_times_a_second() -> None:
    cuda = FakeCuda()
    reads = []
    stats = cuda.memory_stats
    cuda.memory_stats = lambda d: reads.append(d) or stats(d)  # type: ignore[method-assign]
    probe = Probe(torch_module=SimpleNamespace(cuda=cuda))
    probe._attach_torch()
    end = time.perf_counter() + 1.2
    while time.perf_counter() < end:
        probe.step(batch_size=8)
    assert probe.steps > 1000
    assert len(reads) <= 2 * 1.2 / gp.PEAK_EVERY_S + 2  # a read when due, one a step later
    assert len(probe.snapshot()["batch_sizes"]) >= 1


def test_publishes_with_private_permissions(dirs: SimpleNamespace) -> None:
    probe = Probe(torch_module=SimpleNamespace())  # no torch needed to publish
    path = probe.start(interval=0.05)
    try:
        assert path == dirs.probe / f"{os.getpid()}.json"
        deadline = time.monotonic() + 5
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(dirs.probe).st_mode) == 0o700
        assert not [p for p in dirs.probe.iterdir() if p.name.endswith(".tmp")]
    finally:
        probe.stop()
    assert not path.exists()  # removed at stop so the monitor does not wait 5 s to forget it


def test_falls_back_to_tmp_and_refuses_a_directory_planted_there(
        dirs: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    planted = dirs.tmp / f"gputop-{os.getuid()}"
    planted.symlink_to(dirs.xdg)
    probe = Probe(torch_module=SimpleNamespace())
    assert probe.start() is None  # a symlink someone else made is not ours to write into
    planted.unlink()
    path = probe.start()
    try:
        assert path is not None and path.parent == planted and planted.is_dir()
    finally:
        probe.stop()


def test_payload_with_torch_on_the_cpu(dirs: SimpleNamespace,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    monkeypatch.setattr(DataLoader, "__iter__", DataLoader.__iter__)  # restored after the test
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    probe = Probe()
    assert gp.patch_dataloader(probe)
    loader = DataLoader(TensorDataset(torch.zeros(40, 3), torch.zeros(40)), batch_size=8)
    for _x, _y in loader:
        pass
    for _x, _y in probe.wrap(loader):  # wrap() on an already timed loader counts once
        pass
    probe.start(interval=60)
    try:
        path = probe.publish()
        assert path is not None
        sample = parse_payload(path.read_bytes(), os.getpid())
    finally:
        probe.stop()
    assert sample.steps == 10
    assert sample.torch == torch.__version__
    assert sample.allocator_conf == "expandable_segments:True"
    if not torch.cuda.is_available():
        assert sample.device is None and sample.allocated is None and sample.batch_sizes == ()


RUNNER_SCRIPT = """
    import json, sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset
    import gputop.probe as gp

    class Slow(Dataset):
        def __len__(self): return 12
        def __getitem__(self, i):
            time.sleep(0.01)
            return torch.zeros(4)

    for batch in DataLoader(Slow(), batch_size=3):
        pass
    snap = gp.snapshot()
    print(json.dumps({"argv": sys.argv, "main": __name__, "steps": snap["steps"],
                      "wait_frac": snap["wait_frac"], "path": str(gp._PROBE.path)}))
"""


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_the_runner_probes_a_script_that_was_not_edited(
        dirs: SimpleNamespace, tmp_path: Path, enabled: str) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(RUNNER_SCRIPT))
    env = {**os.environ, "GPUTOP_PROBE": enabled}
    r = subprocess.run([sys.executable, "-m", "gputop.probe", str(script), "--lr", "3e-4"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["argv"] == [str(script), "--lr", "3e-4"]
    assert out["main"] == "__main__"
    if enabled == "1":
        assert out["steps"] == 4
        assert out["wait_frac"] > 0.5
        assert out["path"].startswith(str(dirs.probe))
    else:
        assert out["steps"] == 0 and out["path"] == "None"


def test_the_runner_passes_on_the_scripts_exit_status(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import sys\nsys.exit(3)\n")
    r = subprocess.run([sys.executable, "-m", "gputop.probe", str(script)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "GPUTOP_PROBE": "0"})
    assert r.returncode == 3


# ----------------------------------------------------------------------------------------------
# the monitor side

PID = 4242
NOW = 1_800_000_000.0


def payload(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "v": 1, "ts": NOW - 1, "pid": PID, "device": 0,
        "uuid": "GPU-58e4b2c6-8a5e-1c1f-3d6b-0123456789ab",
        "allocated": 37 * GIB, "reserved": 42 * GIB, "active": 37 * GIB,
        "inactive_split": GIB, "num_alloc_retries": 0, "num_ooms": 0,
        "peak_allocated": 40 * GIB, "peak_reserved": 43 * GIB,
        "allocator_conf": None, "steps": 120, "step_time_s": 0.033, "loader_wait_s": 0.8,
        "wait_frac": 0.476, "recent_wait_frac": 0.02,
        "batch_sizes": [[88, 40 * GIB], [88, 40 * GIB]],
        "torch": "2.13.0+cu130",
    }
    doc.update(over)
    return doc


def put(directory: Path, body: bytes | dict[str, Any], *, mode: int = 0o600,
        pid: int = PID) -> Path:
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"{pid}.json"
    path.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())
    os.chmod(path, mode)
    return path


def read(notes: list[str] | None = None) -> dict[int, ProbeSample]:
    return read_probes({PID: os.getuid()}, NOW, notes if notes is not None else [])


def test_reads_a_well_formed_fresh_file(dirs: SimpleNamespace) -> None:
    put(dirs.probe, payload())
    notes: list[str] = []
    sample = read(notes)[PID]
    assert notes == []
    assert sample.reserved == 42 * GIB and sample.wait_frac == 0.476
    assert sample.recent_wait_frac == 0.02
    assert sample.batch_sizes == ((88, 40 * GIB), (88, 40 * GIB))
    with pytest.raises(AttributeError):
        sample.steps = 0  # type: ignore[misc]


def test_reads_what_the_probe_writes(dirs: SimpleNamespace,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,\x1b[2J")
    probe = Probe(torch_module=SimpleNamespace(__version__="2.13.0"))
    for _ in probe.wrap(slow_loader(3, delay=0.0)):
        pass
    probe.start(interval=60)
    try:
        probe.publish()
        samples = read_probes({os.getpid(): os.getuid()}, time.time())
    finally:
        probe.stop()
    assert samples[os.getpid()].steps == 3
    # an escape in the environment is defused by the writer, not a reason to drop the file
    assert samples[os.getpid()].allocator_conf == "expandable_segments:True,?[2J"


def test_a_file_from_a_probe_before_the_recent_share_is_read(dirs: SimpleNamespace) -> None:
    put(dirs.probe, {k: v for k, v in payload().items() if k != "recent_wait_frac"})
    notes: list[str] = []
    sample = read(notes)[PID]
    assert notes == [] and sample.wait_frac == 0.476 and sample.recent_wait_frac is None


def test_finds_the_tmp_fallback_and_prefers_the_freshest(dirs: SimpleNamespace) -> None:
    put(dirs.tmp / f"gputop-{os.getuid()}", payload(ts=NOW - 0.5, steps=7))
    put(dirs.probe, payload(ts=NOW - 3, steps=3))
    assert read()[PID].steps == 7


def test_a_stale_file_is_ignored(dirs: SimpleNamespace) -> None:
    put(dirs.probe, payload(ts=NOW - 6))
    notes: list[str] = []
    assert read(notes) == {}
    assert notes == []  # a process that exited uncleanly is not an attack


def test_no_file_no_note(dirs: SimpleNamespace) -> None:
    notes: list[str] = []
    assert read(notes) == {}
    assert notes == []


def test_another_users_file_is_ignored(dirs: SimpleNamespace,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = put(dirs.probe, payload())
    if os.getuid() == 0:
        os.chown(path, 12345, -1)
    else:  # without root, make fstat say so
        real_fstat = os.fstat

        def fstat(fd: int) -> os.stat_result:
            st = real_fstat(fd)
            if stat.S_ISREG(st.st_mode):
                return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 12345,
                                       *tuple(st)[5:10]))
            return st

        monkeypatch.setattr(os, "fstat", fstat)
    notes: list[str] = []
    assert read(notes) == {}
    assert "owned by uid 12345" in notes[0]


def test_a_directory_others_can_write_is_ignored(dirs: SimpleNamespace) -> None:
    put(dirs.probe, payload())
    os.chmod(dirs.probe, 0o777)
    notes: list[str] = []
    assert read(notes) == {}
    assert "writable by group or others" in notes[0]


def test_a_group_writable_file_is_ignored(dirs: SimpleNamespace) -> None:
    put(dirs.probe, payload(), mode=0o620)
    notes: list[str] = []
    assert read(notes) == {}
    assert "writable by group or others" in notes[0]


def test_a_symlink_is_not_followed(dirs: SimpleNamespace, tmp_path: Path) -> None:
    target = put(tmp_path / "elsewhere", payload())
    dirs.probe.mkdir(mode=0o700)
    (dirs.probe / f"{PID}.json").symlink_to(target)
    notes: list[str] = []
    assert read(notes) == {}
    assert "symlink" in notes[0]


def test_a_fifo_does_not_hang_the_monitor(dirs: SimpleNamespace) -> None:
    dirs.probe.mkdir(mode=0o700)
    os.mkfifo(dirs.probe / f"{PID}.json", 0o600)
    notes: list[str] = []
    assert read(notes) == {}
    assert "not a regular file" in notes[0]


def test_a_huge_file_is_not_read(dirs: SimpleNamespace) -> None:
    doc = payload(allocator_conf="x" * 100)
    body = json.dumps(doc).encode()
    put(dirs.probe, body + b" " * (pr.MAX_BYTES + 1 - len(body)))
    notes: list[str] = []
    assert read(notes) == {}
    assert "limit" in notes[0]


def _edit(**over: Any) -> bytes:
    return json.dumps(payload(**over)).encode()


MALFORMED = {
    "bad JSON": (b"{not json", "not JSON"),
    "not UTF-8": (b"\xff\xfe", "not JSON"),
    "hostile nesting": (b"[" * 30_000 + b"]" * 30_000, "not JSON"),
    "not an object": (b"[1, 2]", "not a JSON object"),
    "string for int": (_edit(steps="120"), "steps"),
    "bool for int": (_edit(steps=True), "steps"),
    "negative bytes": (_edit(reserved=-1), "reserved"),
    "negative seconds": (_edit(loader_wait_s=-0.5), "loader_wait_s"),
    "fraction above 1": (_edit(wait_frac=1.5), "wait_frac"),
    "recent share above 1": (_edit(recent_wait_frac=1.5), "recent_wait_frac"),
    "recent share as text": (_edit(recent_wait_frac="0.5"), "recent_wait_frac"),
    "zero batch": (_edit(batch_sizes=[[0, 1]]), "batch_sizes"),
    "triple for pair": (_edit(batch_sizes=[[8, 1, 2]]), "batch_sizes"),
    "too many pairs": (_edit(batch_sizes=[[8, 1]] * 300), "batch_sizes"),
    "escape in uuid": (_edit(uuid="GPU-\x1b]0;pwned\x07"), "uuid"),
    "escape in conf": (_edit(allocator_conf="a\x1b[2J"), "allocator_conf"),
    "other version": (_edit(v=2), "v"),
    "other pid": (_edit(pid=1), "pid 1"),
    "future": (_edit(ts=NOW + 60), "future"),
    "extra key": (_edit(extra=1), "unexpected"),
    "missing key": (json.dumps({k: v for k, v in payload().items() if k != "steps"}).encode(),
                    "missing"),
    "NaN": (_edit(step_time_s=None).replace(b"null", b"NaN", 1), "not JSON"),
    "infinity": (_edit().replace(b'"steps": 120', b'"steps": 1e400'), "steps"),
    "duplicate key": (_edit()[:-1] + b', "steps": 1}', "not JSON"),
}


@pytest.mark.parametrize(("body", "why"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_file_is_ignored_with_a_note(dirs: SimpleNamespace, body: bytes,
                                                 why: str) -> None:
    put(dirs.probe, body)
    notes: list[str] = []
    assert read(notes) == {}
    assert len(notes) == 1 and why in notes[0], notes
