"""The fault matrix: gputop run as a user runs it, through NVIDIA's real binding (pynvml) over the
fake libnvidia-ml.so.1 of ../shared/fakenvml, while the library fails the way the driver fails.

Every fault is crossed with every mode (`--once`, `--once --json`, `--record --headless`, `serve`
scraped over loopback, the dashboard on Textual's headless driver). In every case: no traceback,
no hang (each run has a deadline), no lost tick, and where gputop cannot go on (NVML does not
start) one line on stderr and a non-zero exit.

The library is the one built in ../shared/fakenvml/build, or built here with `make` into a
temporary folder; without ../shared or a C compiler the matrix is skipped.
"""

from __future__ import annotations

import ctypes.util
import gzip
import itertools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputop.model import Snapshot
from gputop.recording import read_recording

ROOT = Path(__file__).resolve().parents[2]
FAKENVML = ROOT.parent / "shared" / "fakenvml"
DASHBOARD = ROOT / "tests" / "helpers" / "dashboard_headless.py"
GPUS = 3
INTERVAL = 0.25
TICKS = 6  # --record --headless --count
DEADLINE = 60.0  # seconds any one run may take: past it, gputop hung
POD_NAME = "p" * 100_000


@dataclass(frozen=True)
class Fault:
    name: str
    scenario: str = ""
    env: dict[str, str] = field(default_factory=dict)
    error: str = ""  # gputop cannot go on: the words of its one line
    lost: frozenset[int] = frozenset()  # GPUs lost by the end of a run of a second or more
    xids: dict[int, int] = field(default_factory=dict)  # GPU -> Xids seen by then
    hostile: bool = False  # the scenario names the hostile processes


FAULTS = [
    Fault("driver-not-loaded", env={"FAKE_NVML_INIT_ERROR": "DRIVER_NOT_LOADED"},
          error="driver is not loaded"),
    Fault("version-mismatch", env={"FAKE_NVML_INIT_ERROR": "LIB_RM_VERSION_MISMATCH"},
          error="version mismatch"),
    Fault("no-permission", env={"FAKE_NVML_INIT_ERROR": "NO_PERMISSION"},
          error="no permission"),
    Fault("unknown-init-error", env={"FAKE_NVML_INIT_ERROR": "UNKNOWN"},
          error="NVML failed to start"),
    Fault("no-library", env={"LD_LIBRARY_PATH": ""}, error="libnvidia-ml.so.1) not found"),
    # GPU 1 falls off the bus mid-run (the Xid the driver logs, then every call GPU_IS_LOST);
    # GPU 2 is lost before gputop starts.
    Fault("gpu-lost", "[gpu 1]\nxid = 0.8 79\nlost_after = 0.8\n[gpu 2]\nlost_after = 0\n",
          lost=frozenset({1, 2})),
    Fault("xid", "[gpu 0]\nxid = 0.5 13\nxid = 0.7 48\n[gpu 2]\nxid = 0.6 31\n",
          xids={0: 2, 2: 1}),
    # Every dynamic metric NOT_SUPPORTED on GPU 1; GPU 0 without events or NVLink.
    Fault("unsupported", "[gpu 0]\nevent_types = 0\nnvlink_links = 0\n[gpu 1]\n" + "".join(
        f"{m} = na\n" for m in ("util_gpu", "util_mem", "util_enc", "util_dec", "power_w",
                                "temp_c", "temp_mem_c", "clock_sm", "clock_graphics",
                                "clock_video", "pcie_tx_kbs", "pcie_rx_kbs", "nvlink_tx_kibs",
                                "nvlink_rx_kibs"))),
    # Real processes whose names and arguments are not UTF-8, hold escapes and markup, and one
    # with a 100 KB POD_NAME.
    Fault("hostile-processes", hostile=True),
]
MODES = ["once", "json", "record", "serve", "dashboard"]


# ----------------------------------------------------------------------------------------------
# the fake library and the processes


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FAKENVML.is_dir():
        pytest.skip(f"no fake NVML library here ({FAKENVML})")
    built = FAKENVML / "build"
    if (built / "libnvidia-ml.so.1").is_file():
        return built
    if not (shutil.which("cc") and shutil.which("make") and shutil.which("nm")):
        pytest.skip("no C compiler to build the fake NVML library")
    out = tmp_path_factory.mktemp("fakenvml")
    subprocess.run(["make", "-s", "-C", str(FAKENVML), f"BUILD={out}",
                    f"{out}/libnvidia-ml.so.1"], check=True, timeout=300)
    return out


@dataclass
class Hostile:
    pids: list[int]
    pod_pid: int


@pytest.fixture(scope="module")
def hostile() -> Iterator[Hostile]:
    """Processes any user of a node can start: argv[0] the byte 0xff, a Latin-1 file name as an
    argument, terminal escapes and markup as a name, a 100 KB POD_NAME."""
    sleep = shutil.which("sleep") or "/bin/sleep"
    py = ["-c", "import time; time.sleep(600)"]
    env = {**os.environ, "POD_NAME": POD_NAME, "POD_NAMESPACE": "ns\udcff"}
    env_bytes = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    procs = [
        subprocess.Popen([b"\xff", b"600"], executable=sleep),
        subprocess.Popen([sys.executable.encode(), *(a.encode() for a in py),
                          b"r\xe9sum\xe9-caf\xe9.txt"]),
        subprocess.Popen([b"\x1b]0;pwned\x07[red]x[/red] \xfe", b"600"], executable=sleep),
        subprocess.Popen([sys.executable, *py], env=env_bytes),  # type: ignore[arg-type]
    ]
    try:
        yield Hostile([p.pid for p in procs], procs[-1].pid)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def scenario_text(fault: Fault, hostile: Hostile | None) -> str:
    text = f"[system]\ndevices = {GPUS}\n{fault.scenario}"
    if hostile is not None:
        for i, pid in enumerate(hostile.pids):
            text += f"[gpu {i % GPUS}]\nproc = {pid} {1000 + i} name=x\n"
    return text


@dataclass
class Run:
    rc: int
    out: bytes
    err: str
    seconds: float


class Case:
    """One fault in one mode: the environment and how to run gputop in it."""

    def __init__(self, fault: Fault, libdir: Path, tmp: Path, hostile: Hostile | None) -> None:
        self.fault = fault
        self.tmp = tmp
        scenario = tmp / "scenario.txt"
        scenario.write_text(scenario_text(fault, hostile))
        self.env = {**os.environ, "LD_LIBRARY_PATH": str(libdir),
                    "FAKE_NVML_SCENARIO": str(scenario), "NO_COLOR": "1",
                    "PYTHONIOENCODING": "utf-8:surrogateescape"}
        self.env.pop("GPUTOP_DEBUG", None)
        self.env.update(fault.env)

    def gputop(self, *args: str) -> Run:
        return self.run([sys.executable, "-m", "gputop", *args])

    def run(self, argv: list[str]) -> Run:
        start = time.monotonic()
        try:
            p = subprocess.run(argv, env=self.env, capture_output=True, timeout=DEADLINE,
                               stdin=subprocess.DEVNULL, cwd=self.tmp)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hang: {argv[2:]} under {self.fault.name} ran past {DEADLINE:.0f} s")
        return Run(p.returncode, p.stdout, p.stderr.decode("utf-8", "replace"),
                   time.monotonic() - start)


# ----------------------------------------------------------------------------------------------
# what every case must show


def no_traceback(run: Run) -> None:
    assert "Traceback" not in run.err and "internal error" not in run.err, run.err


def one_line_error(run: Run, fault: Fault) -> None:
    assert run.rc not in (0, 70), (run.rc, run.err)
    lines = run.err.splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("gputop: ") and fault.error in lines[0], lines[0]


def lost_ok(devices: list[dict], fault: Fault) -> None:
    assert sorted(d["index"] for d in devices) == list(range(GPUS))  # none dropped
    lost = {d["index"] for d in devices if d.get("lost")}
    assert lost <= fault.lost


def xids_ok(snap: Snapshot, fault: Fault) -> None:
    counts = {d.index: d.xid_count for d in snap.devices}
    assert {g: counts[g] for g in fault.xids} == fault.xids, counts


def hostile_text_ok(text: str, *, line_max: int | None = 2000, escaped: str = "\\xff") -> None:
    """Any text gputop writes: the undecodable bytes escaped, no escape sequence, no line as
    long as the POD_NAME."""
    assert "\x1b" not in text and "\x07" not in text
    assert escaped in text
    if line_max is not None:
        assert max(len(line) for line in text.splitlines()) < line_max


# ----------------------------------------------------------------------------------------------
# the modes


def check_once(case: Case) -> None:
    run = case.gputop("--once")
    no_traceback(run)
    if case.fault.error:
        one_line_error(run, case.fault)
        return
    assert run.rc == 0, run.err
    text = run.out.decode("utf-8")  # strict: a table is text
    lines = text.splitlines()
    gpus = lines[lines.index(next(x for x in lines if x.startswith("GPU  NAME"))) + 1:]
    assert [int(x.split()[0]) for x in gpus[:gpus.index("")]] == list(range(GPUS)), text
    if case.fault.hostile:
        hostile_text_ok(text)


def check_json(case: Case) -> None:
    run = case.gputop("--once", "--json")
    no_traceback(run)
    if case.fault.error:
        one_line_error(run, case.fault)
        assert run.out == b""
        return
    assert run.rc == 0, run.err
    doc = json.loads(run.out.decode("utf-8"))  # strict UTF-8, then strict JSON
    lost_ok(doc["devices"], case.fault)
    if case.fault.hostile:
        hostile_text_ok(run.out.decode())
        jobs = [p["job"] for p in doc["processes"] if p.get("job", {}) and
                p["job"].get("pod_name")]
        assert jobs and all(len(j["pod_name"]) <= 253 for j in jobs)


def check_record(case: Case) -> None:
    path = case.tmp / "run.gputop"
    run = case.gputop("--record", str(path), "--headless", "--count", str(TICKS),
                      "--interval", str(INTERVAL))
    no_traceback(run)
    if case.fault.error:
        one_line_error(run, case.fault)
        return
    assert run.rc == 0, run.err
    snaps = read_recording(path).snapshots
    assert len(snaps) == TICKS, run.err  # no lost tick
    for snap in snaps:
        assert len(snap.devices) == GPUS
    said = [line for line in run.err.splitlines() if "fell off the bus" in line]
    lost_at_end = {d.index for d in snaps[-1].devices if d.lost is not None}
    assert lost_at_end <= case.fault.lost
    assert len(said) == len(lost_at_end), run.err  # one line for each GPU lost
    if case.fault.lost:
        assert 2 in lost_at_end  # lost from the start
    xids_ok(snaps[-1], case.fault)
    if case.fault.hostile:
        data = path.read_bytes()
        hostile_text_ok((gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode(),
                        line_max=None)  # a line a tick
        assert all(len(s.processes) == 4 for s in snaps)
        pods = [p.job.pod_name for p in snaps[-1].processes if p.job and p.job.pod_name]
        assert pods and all(len(pod) <= 253 for pod in pods)


def first_line(p: subprocess.Popen[bytes]) -> str:
    """The first line the process writes on stderr, within DEADLINE."""
    assert p.stderr is not None
    got = b""
    deadline = time.monotonic() + DEADLINE
    while not got.endswith(b"\n"):
        ready, _, _ = select.select([p.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            pytest.fail(f"hang: gputop serve said nothing in {DEADLINE:.0f} s")
        chunk = os.read(p.stderr.fileno(), 1)
        if not chunk:
            break
        got += chunk
    return got.decode("utf-8", "replace")


def check_serve(case: Case) -> None:
    argv = [sys.executable, "-m", "gputop", "serve", "--metrics", "127.0.0.1:0",
            "--interval", str(INTERVAL)]
    start = time.monotonic()
    p = subprocess.Popen(argv, env=case.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=case.tmp)
    try:
        first = first_line(p)  # the URL, or the error
        if case.fault.error:
            rest = p.communicate(timeout=DEADLINE)[1].decode("utf-8", "replace")
            run = Run(p.returncode, b"", first + rest, time.monotonic() - start)
            no_traceback(run)
            one_line_error(run, case.fault)
            return
        m = re.search(r"(http://\S+/metrics)", first)
        assert m, first
        bodies = []
        for _ in range(3):
            time.sleep(2 * INTERVAL)
            with urllib.request.urlopen(m.group(1), timeout=10) as r:
                bodies.append(r.read().decode("utf-8"))  # strict
        for body in bodies:
            fams = {f.name: f for f in text_string_to_metric_families(body)}
            up = fams["gputop_up"].samples[0].value
            errors = fams["gputop_poll_errors"].samples[0].value
            assert (up, errors) == (1, 0), body[-2000:]  # every poll made it
            lost = {s.labels["gpu"]: s.value for s in fams["gputop_gpu_lost"].samples}
            assert sorted(lost) == [str(i) for i in range(GPUS)]
            assert {int(g) for g, v in lost.items() if v} <= case.fault.lost
            if case.fault.hostile:  # labels name the process by its executable: `sleep`
                hostile_text_ok(body, escaped='namespace="ns')
                assert 'pod="ppp' in body
        xids = {int(s.labels["gpu"]): s.value for s in fams["gputop_xid_events"].samples}
        assert {g: xids.get(g) for g in case.fault.xids} == case.fault.xids, xids
        p.send_signal(signal.SIGTERM)
        rest = p.communicate(timeout=DEADLINE)[1].decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: gputop serve under {case.fault.name}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    run = Run(p.returncode, b"", first + rest, time.monotonic() - start)
    no_traceback(run)
    assert run.rc == 0, run.err


def check_dashboard(case: Case) -> None:
    path, screen = case.tmp / "dash.gputop", case.tmp / "screen.svg"
    seconds = 2.5
    run = case.run([sys.executable, str(DASHBOARD), str(seconds), str(screen),
                    "--interval", str(INTERVAL), "--record", str(path)])
    no_traceback(run)
    if case.fault.error:
        one_line_error(run, case.fault)
        return
    assert run.rc == 0, run.err
    text = screen.read_text(encoding="utf-8").replace("&#160;", " ")
    assert "NO DATA" not in text and "feed stopped" not in text
    snaps = read_recording(path).snapshots
    assert len(snaps) >= 3  # ~10 at 0.25 s; the headless app shares 2 cores with the others
    gaps = [b.time - a.time for a, b in itertools.pairwise(snaps)]
    assert max(gaps) < 5.0, gaps  # ticks kept coming
    for snap in snaps:
        assert len(snap.devices) == GPUS
    if case.fault.lost:
        assert "LOST" in text
    xids_ok(snaps[-1], case.fault)
    if case.fault.hostile:
        assert "\\xff" in text
        assert all(len(s.processes) == 4 for s in snaps)


CHECKS = {"once": check_once, "json": check_json, "record": check_record,
          "serve": check_serve, "dashboard": check_dashboard}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_fault_matrix(fault: Fault, mode: str, libdir: Path, tmp_path: Path,
                      request: pytest.FixtureRequest) -> None:
    if fault.name == "no-library" and ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real NVIDIA library")
    procs = request.getfixturevalue("hostile") if fault.hostile else None
    CHECKS[mode](Case(fault, libdir, tmp_path, procs))
