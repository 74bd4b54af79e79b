"""The `gputop` command as a user meets it: one-shot output, JSON, recording, and errors that are
one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import ctypes.util
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.commands.main import main
from gputop.model import Snapshot
from gputop.recording import read_recording
from gputop.testing.fake_nvml import FakeNvml, Fault
from gputop.testing.synthetic import node, series

HAVE_NVML = ctypes.util.find_library("nvidia-ml") is not None
_find_spec = importlib.util.find_spec


def gputop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_version() -> None:
    r = gputop("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("gputop ")


def test_once_prints_every_gpu_and_process(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeNvml([node(8, links=18)]):
        assert main(["--once"]) == 0
    out = capsys.readouterr().out
    assert out.count("NVIDIA H100 80GB HBM3") == 8
    assert "driver 580.159.04" in out and "CUDA 13.0" in out
    assert "PWR CAP" in out
    for pid in range(1000, 1008):
        assert f" {pid} " in out


def test_once_table_asks_the_driver_only_what_it_shows(
        capsys: pytest.CaptureFixture[str]) -> None:
    # NVLink, the topology, max clocks, ECC... are in --json, not in the table: a one-shot
    # table of an 8-GPU node makes about 200 driver calls where the whole Snapshot takes 2,000.
    with FakeNvml([node(8, links=18)]) as fake:
        assert main(["--once"]) == 0
    table = sum(fake.calls.values())
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 0
    assert fake.calls["nvmlDeviceGetMaxClockInfo"] == 0
    assert capsys.readouterr().out.count("NVIDIA H100 80GB HBM3") == 8
    with FakeNvml([node(8, links=18)]) as fake:
        assert main(["--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert fake.calls["nvmlDeviceGetNvLinkState"] > 0
    assert doc["devices"][0]["clock_sm_max"] == 1980 and len(doc["links"]) == 8 * 18
    assert table * 4 < sum(fake.calls.values())


def test_once_json_is_the_documented_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeNvml([node(2)]):
        assert main(["--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gputop.snapshot/1"
    assert [d["name"] for d in doc["devices"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert doc["devices"][0]["mem_total"] == 85520809984
    assert doc["devices"][0]["fan"] is None
    assert doc["devices"][0]["unavailable"]["fan"] == {"reason": "unsupported"}
    assert [p["pid"] for p in doc["processes"]] == [1000, 1001]
    assert Snapshot.from_dict(doc).devices[0].name == "NVIDIA H100 80GB HBM3"


def test_devices_filter(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeNvml([node(4)]):
        assert main(["--once", "--json", "--devices", "1,3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["index"] for d in doc["devices"]] == [1, 3]
    assert [p["device_index"] for p in doc["processes"]] == [1, 3]


@pytest.mark.parametrize("code, words", [
    (18, "gputop: NVIDIA driver/library version mismatch: the driver was upgraded without a "
         "reboot"),
    (9, "gputop: NVIDIA driver is not loaded"),
    (4, "gputop: no permission to open the NVIDIA devices"),
])
def test_driver_faults_are_one_line_and_exit_1(code: int, words: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with FakeNvml(series(1), faults=[Fault("nvmlInitWithFlags", code)]):
        assert main(["--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(words)
    assert err.count("\n") == 1


@pytest.mark.skipif(HAVE_NVML, reason="this machine has an NVIDIA driver")
def test_no_driver_on_this_machine_is_one_line_not_a_traceback() -> None:
    r = gputop("--once")
    assert r.returncode == 1
    assert r.stderr.startswith("gputop: NVIDIA driver library (libnvidia-ml.so.1) not found")
    assert r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr


def test_a_pipe_gets_one_snapshot_like_once() -> None:
    r = gputop("--demo")  # stdout is a pipe here
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("NVIDIA H100 80GB HBM3") == 8
    assert "slurm:48213" in r.stdout


def test_demo_once_json() -> None:
    r = gputop("--demo", "--once", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["devices"]) == 8
    assert len(doc["links"]) == 8 * 18


def test_headless_recording_of_the_demo(tmp_path: Path) -> None:
    out = tmp_path / "run.gputop"
    r = gputop("--demo", "--record", str(out), "--count", "3", "--interval", "0.05")
    assert r.returncode == 0, r.stderr
    assert "3 snapshots" in r.stderr
    snaps = read_recording(out).snapshots
    assert len(snaps) == 3 and len(snaps[0].devices) == 8


def test_the_demo_keeps_to_the_devices_asked_for(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    assert main(["--demo", "--once", "--devices", "0,2"]) == 0
    out = capsys.readouterr().out
    assert out.count("NVIDIA H100 80GB HBM3") == 2
    assert main(["--demo", "--once", "--json", "--devices", "0,2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["index"] for d in doc["devices"]] == [0, 2]
    assert {p["device_index"] for p in doc["processes"]} == {0, 2}
    assert {lk["device_index"] for lk in doc["links"]} == {0, 2}
    out_file = tmp_path / "run.gputop"
    assert main(["--demo", "--record", str(out_file), "--headless", "--count", "2",
                 "--interval", "0.05", "--devices", "2"]) == 0
    assert [[d.index for d in s.devices] for s in read_recording(out_file).snapshots] == [[2], [2]]
    assert main(["serve", "--demo", "--once", "--devices", "0,2"]) == 0
    scrape = capsys.readouterr().out
    assert 'gpu="0"' in scrape and 'gpu="2"' in scrape and 'gpu="1"' not in scrape


def test_the_demo_dashboard_is_read_only_and_keeps_to_its_devices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop.ui.app import GputopApp

    seen: dict[str, GputopApp] = {}
    monkeypatch.setattr(GputopApp, "run", lambda self, **kw: seen.setdefault("app", self))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert main(["--demo", "--devices", "0,2"]) == 0
    app = seen["app"]
    # Its processes exist only in the recording: nothing to signal, as in replay.
    assert app.readonly and app.kill_policy.readonly
    assert [d.index for d in app.feed.feed.poll_once().devices] == [0, 2]  # type: ignore


def test_headless_recording_says_when_a_gpu_is_lost_and_records_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.gputop"
    with FakeNvml(series(1, 3), faults=[Fault("*", 15, device=1)]):  # 15: GPU_IS_LOST
        assert main(["--record", str(out), "--headless", "--count", "3",
                     "--interval", "0.01"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "GPU 1" in line]
    assert len(said) == 1  # once, not every tick
    assert said[0].startswith("gputop: GPU 1 fell off the bus at ")  # before its name was read
    assert said[0].endswith("recording the other GPUs")
    snaps = read_recording(out).snapshots
    assert len(snaps) == 3
    assert [d.lost is not None for d in snaps[-1].devices] == [False, True, False]


def test_recording_into_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    r = gputop("--demo", "--record", str(tmp_path / "no" / "such" / "dir.gputop"),
               "--count", "1")
    assert r.returncode == 1
    assert r.stderr.startswith("gputop: cannot create")
    assert "Traceback" not in r.stderr


def test_bad_arguments_exit_2() -> None:
    r = gputop("--interval", "0")
    assert r.returncode == 2
    assert "must be greater than 0" in r.stderr


def test_untrusted_process_text_cannot_reach_the_terminal(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop.ui.view.table import render

    snap = node(1)
    import dataclasses
    evil = dataclasses.replace(snap.processes[0], user="\x1b[31mroot",
                               cmdline=("python", "\x1b]0;pwned\x07", "[red]x[/red]"))
    out = render(dataclasses.replace(snap, processes=(evil,)))
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07 [red]x[/red]" in out


REALDATA = Path(__file__).resolve().parents[1] / "data" / "realdata" / "nvidia-smi-xml"


def test_import_nvidia_smi_dumps_then_replay_them(tmp_path: Path) -> None:
    out = tmp_path / "t4.gputop"
    r = gputop("import", "-o", str(out), str(REALDATA / "tesla-t4_x1_drv515_telegraf.xml"))
    assert r.returncode == 0, r.stderr
    r = gputop("replay", str(out))  # a pipe: prints the last snapshot
    assert r.returncode == 0, r.stderr
    assert "Tesla T4" in r.stdout and "27/70 W" in r.stdout


def test_replay_of_a_file_of_the_wrong_kind_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a recording")
    r = gputop("replay", str(bad))
    assert r.returncode == 1
    assert r.stderr == f"gputop: {bad} is not a gputop recording: expected a gzip stream of " \
                       "JSON lines\n"


def test_unknown_command() -> None:
    r = gputop("frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr


@pytest.mark.parametrize("command", [[], ["replay"]])
def test_every_option_says_what_it_does(command: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    out = capsys.readouterr().out
    # An option alone on its line, with no words after it nor on the next line, says nothing.
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if re.fullmatch(r"  -[-\w]+(?: [A-Z_]+)?", line):
            assert lines[i + 1].startswith(" " * 10), f"{line.strip()} has no help text"
    assert "--no-mouse" in out and "--ansi" in out


def test_the_readme_writes_the_glyphs_the_dashboard_shows() -> None:
    from gputop.ui.view.status import CROSS

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert f"`{CROSS} LOST`" in readme
    assert "✗" not in readme


def test_the_monitor_command_loads_no_dashboard_exporter_or_diagnostics_until_it_needs_them(
        ) -> None:
    # `gputop --once` and the first frame of the dashboard wait for every module loaded first.
    code = ("import sys, gputop.commands.main; "
            "print(sorted(m for m in ('textual', 'prometheus_client', 'gputop.diagnose', "
            "'asyncio') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_once_shows_a_draw_without_a_known_limit_as_watts_alone() -> None:
    import dataclasses

    from gputop.model import Missing
    from gputop.ui.view.table import render

    snap = node(1)
    gpu = dataclasses.replace(snap.devices[0], power_draw=636.0,
                              power_limit=Missing("unsupported"), clock_sm=Missing("unsupported"))
    out = render(dataclasses.replace(snap, devices=(gpu,)))
    assert "636 W" in out and "n/s W" not in out and "/n/s" not in out
    assert "n/s MHz" not in out  # nor a unit after a clock it does not know


@pytest.mark.parametrize("amdsmi_installed", [False, True])
def test_no_gpu_at_all_names_demo_and_with_amdsmi_rocm_too(
        amdsmi_installed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import gputop.sources.amd

    monkeypatch.setattr(gputop.sources.amd, "amd_gpu_present", lambda *a, **k: False)
    if amdsmi_installed:  # an importable amdsmi package, as `pip install gputop-ml[amd]` leaves
        (tmp_path / "amdsmi").mkdir()
        (tmp_path / "amdsmi" / "__init__.py").write_text("")
        monkeypatch.syspath_prepend(str(tmp_path))
    else:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name == "amdsmi" else _find_spec(name, *a))
    importlib.invalidate_caches()
    with FakeNvml(series(1), faults=[Fault("nvmlInitWithFlags", 12)]):  # library not found
        assert main(["--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gputop: NVIDIA driver library (libnvidia-ml.so.1) not found")
    assert err.count("\n") == 1
    assert "gputop --demo" in err
    assert ("ROCm" in err) is amdsmi_installed

