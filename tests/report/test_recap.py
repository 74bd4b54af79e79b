"""`gputop report`: the demo recording's story, and the command's output and errors."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from dataclasses import replace
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from gputop.commands.report import main
from gputop.model import Missing, ProcessSample, mark_all
from gputop.recording import FOOTER_SIZE, RecordingWriter
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import GIB, H100_RESERVED, H100_TOTAL, node

T0 = 1_800_000_000.0
MiB = 1 << 20
DEMO = Path(str(files("gputop") / "data" / "demo-8xh100.jsonl.gz"))

# The story in tools/make_demo.py, as (id, GPU) -> the seconds its finding may start in. Each
# condition is judged over a window, so a finding starts after its phase does.
STORY = {
    # Starved 130-330: one finding per rank, from the probe's ~57 % of each step at once.
    **{("loader.starvation", i): (130, 140) for i in range(8)},
    ("thermal.sw", 5): (450, 500),  # hot 450-520
    ("job.straggler", 5): (450, 520),
    ("mem.growth", 2): (520, 600),  # leak 520-600
    ("nvlink.errors", 6): (0, 60),  # replays creep up throughout
}
# More than half of each step waiting for the batch is critical (rules/starvation.py); the rest
# warn.
CRITICAL = {"loader.starvation"}


@pytest.fixture(scope="module")
def demo() -> dict[str, Any]:
    if not DEMO.exists():
        pytest.skip("the demo recording has not been generated (python tools/make_demo.py)")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([str(DEMO), "--json"]) == 0
    doc: dict[str, Any] = json.loads(buf.getvalue())
    return doc


def test_the_demo_report_finds_exactly_the_story_and_nothing_in_the_healthy_phases(
        demo: dict[str, Any]) -> None:
    t0 = demo["start"]
    found = {(f["id"], f["device"]): f for f in demo["findings"]}
    assert len(found) == len(demo["findings"])  # one finding per problem, none reopened
    assert set(found) == set(STORY)
    for key, (lo, hi) in STORY.items():
        assert lo <= found[key]["start"] - t0 <= hi, key
        assert found[key]["severity"] == ("critical" if key[0] in CRITICAL else "warning")
    for i in range(8):  # the probe's share over its last few steps sees the stall end at 330
        end = found[("loader.starvation", i)]["end"]
        assert end is not None and 330 <= end - t0 <= 345
    straggler_end = found[("job.straggler", 5)]["end"]
    assert straggler_end is not None and straggler_end - t0 <= 570


def test_the_demo_starvation_leads_with_the_measured_wait_and_names_the_workers(
        demo: dict[str, Any]) -> None:
    by = {(f["id"], f["device"]): f for f in demo["findings"]}
    for i in range(8):
        f = by[("loader.starvation", i)]
        assert f["pid"] == 2210431 + i
        assert next(iter(f["evidence"])) == "wait_frac"  # measured in the loop: it leads
        assert 0.5 < f["evidence"]["wait_frac"] < 0.65 and f["evidence"]["busy_pct"] < 70
        assert f["evidence"]["workers"] == 6 and f["evidence"]["worker_cpu_pct"] >= 95
        assert f["title"].startswith(f"GPU{i} starved: PID {2210431 + i} `train.py` waits on "
                                     "its DataLoader 57 % of each step; 6 workers at ")
        assert len(f["title"]) <= 105  # one line of the findings panel at 120 columns
        assert f["cause"].startswith("Measured in the process by gputop.probe")
        assert "CPU-bound" in f["cause"] and "num_workers" in f["fix"]


def test_the_demo_thermal_leak_and_nvlink_findings_carry_their_numbers(
        demo: dict[str, Any]) -> None:
    by = {(f["id"], f["device"]): f for f in demo["findings"]}
    thermal = by[("thermal.sw", 5)]
    assert thermal["evidence"]["margin_c"] <= 1 and thermal["evidence"]["sw_thermal_s"] > 20
    leak = by[("mem.growth", 2)]
    assert 35 <= leak["evidence"]["rate_mib_s"] <= 50
    assert 60 <= leak["evidence"]["time_to_oom_s"] <= 1200
    assert "link 11" in by[("nvlink.errors", 6)]["title"]
    assert "thermal slowdown" in by[("job.straggler", 5)]["title"]


def test_the_demo_summary_per_gpu(demo: dict[str, Any]) -> None:
    devices = {d["index"]: d for d in demo["devices"]}
    assert sorted(devices) == list(range(8))
    for i, d in devices.items():
        assert d["util_pct"]["p50"] >= 90 and d["power_w"]["max"] <= 700
        # 200 s starved (130-330), counted from the probe's first wait to when its share over
        # the last few steps recovers: it sees the stall begin and end within seconds.
        assert 195 <= d["starved_s"] <= 215
        assert d["throttled_s"]["sw_power_cap"] > 300
        assert ("sw_thermal" in d["throttled_s"]) == (i == 5)
    assert 30 <= devices[5]["throttled_s"]["sw_thermal"] <= 70
    assert devices[5]["temp_c"]["max"] >= 86
    mem = devices[2]["mem_used_bytes"]
    assert mem["max"] - mem["p50"] > 2 * GIB  # the leak


# -- the command on small recordings ---------------------------------------------------------


def leaky_lost_run(path: Path) -> None:
    """GPU 1's process leaks (its script name carries a terminal escape); GPU 0 is lost at the
    end."""
    evil = "evil\x1b]0;pwned\x07.py"
    with RecordingWriter(path, summarizer=SummaryKeeper()) as w:
        for t in range(150):
            used = 40 * GIB + 50 * MiB * max(0, t - 20)
            s = node(2, time=T0 + t, mem_used=40 * GIB, processes=False)
            leaky = replace(s.devices[1], mem_used=used,
                            mem_free=H100_TOTAL - H100_RESERVED - used)
            p = ProcessSample(pid=77, device_index=1, gpu_mem=used, sm_util=80.0,
                              cmdline=("python3", evil), create_time=T0 - 3600)
            s = replace(s, devices=(s.devices[0], leaky), processes=(p,))
            if t == 149:
                gone = Missing("gpu_lost", since=T0 + t)
                lost = replace(mark_all(s.devices[0], gone), lost=gone)
                s = replace(s, devices=(lost, s.devices[1]))
            w.write(s)


def test_the_text_report_shows_the_timeline_and_a_table_per_gpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "run.jsonl.gz"
    leaky_lost_run(rec)
    assert main([str(rec)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"gputop report: {rec}"
    assert "2 GPUs · 150 ticks · 2027-01-15 08:00:00 to 08:02:29 UTC (2 min 29 s)" in lines[1]
    header = next(ln for ln in lines if ln.startswith("BEGAN"))
    assert header.split() == ["BEGAN", "SHOWN", "END", "SEVERITY", "GPU", "ID", "TITLE"]
    lost = next(ln for ln in lines if "gpu.lost" in ln)
    assert lost.split()[:6] == ["08:02:29", "08:02:29", "(open)", "CRITICAL", "0", "gpu.lost"]
    leak = next(ln for ln in lines if "mem.growth" in ln).split()
    # The leak's condition began before the finding was shown: its hold is between them.
    assert leak[0] < leak[1] and "PID" in leak and "77" in leak
    assert "\x1b" not in out and "\x07" not in out and "evil\\x1b]0;pwned\\x07.py" in out
    table = lines[next(i for i, ln in enumerate(lines) if ln.startswith("GPU  NAME")):]
    assert "UTIL % p50/p95/max" in table[0] and "THROTTLED" in table[0]
    assert [ln.split()[0] for ln in table[1:]] == ["0", "1"]


def test_the_json_report_has_findings_and_devices(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "run.jsonl.gz"
    leaky_lost_run(rec)
    assert main([str(rec), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["findings"][0]) == {"id", "severity", "device", "pid", "start", "opened",
                                       "end", "title", "cause", "fix", "evidence"}
    for f in doc["findings"]:  # the condition began, then the finding was shown
        assert f["start"] <= f["opened"] <= doc["end"]
    ids = {(f["id"], f["device"]) for f in doc["findings"]}
    assert ids == {("gpu.lost", 0), ("mem.growth", 1)}
    assert [d["index"] for d in doc["devices"]] == [0, 1]
    assert doc["devices"][1]["mem_used_bytes"]["max"] > doc["devices"][1]["mem_used_bytes"]["p50"]


def test_a_damaged_recording_is_reported_up_to_the_damage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "run.jsonl.gz"
    leaky_lost_run(rec)
    data = rec.read_bytes()
    ticks_end = json.loads(gzip.decompress(data[-FOOTER_SIZE:]))["summary_at"]
    rec.write_bytes(data[: ticks_end * 2 // 3])  # cut in the ticks, and without the summary
    assert main([str(rec)]) == 0
    captured = capsys.readouterr()
    note, warning = captured.err.splitlines()
    assert note == ("gputop: run.jsonl.gz has no summary (it was cut short, is still being "
                    "written, or was written by an older gputop): reading the recording tick "
                    "by tick")
    assert warning.startswith("gputop: warning: ") and str(rec) in warning
    assert "FINDINGS" in captured.out and "gpu.lost" not in captured.out  # lost at the very end


@pytest.mark.parametrize("content, message", [
    (b"not a recording\n", "is not a gputop recording"),
    (None, "no such file"),
])
def test_a_wrong_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          content: bytes | None, message: str) -> None:
    path = tmp_path / "x.jsonl.gz"
    if content is not None:
        path.write_bytes(content)
    assert main([str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("gputop: ") and message in captured.err
    assert captured.err.count("\n") == 1


def test_a_recording_without_ticks_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "empty.jsonl.gz"
    RecordingWriter(rec, summarizer=SummaryKeeper()).close()
    assert main([str(rec)]) == 0
    assert "holds no ticks" in capsys.readouterr().out
    assert gzip.decompress(rec.read_bytes())  # a valid, empty recording
