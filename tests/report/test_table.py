"""`gputop export FILE -o OUT.csv|OUT.parquet`: a recording as a table for pandas or a
spreadsheet, one row per (time, GPU) or per (time, process)."""

from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.commands.main import main
from gputop.model import ChildProcess, JobInfo, Missing, ProcessSample, mark_all
from gputop.recording import RecordingWriter
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
FORMULA = "=HYPERLINK(\"http://x\")"


def run(path: Path, ticks: int = 4) -> None:
    """2 GPUs; GPU 1 has no fan reading; GPU 0 is lost at the last tick; one process with two
    workers in a Slurm job, whose name would be a spreadsheet formula."""
    with RecordingWriter(path, summarizer=SummaryKeeper()) as w:
        for t in range(ticks):
            s = node(2, time=T0 + t + 0.25, processes=False, util_gpu=float(90 + t))
            d1 = replace(s.devices[1], fan=Missing("unsupported"),
                         throttle=("sw_power_cap", "sw_thermal"))
            d0 = s.devices[0]
            if t == ticks - 1:
                gone = Missing("gpu_lost", since=T0 + t)
                d0 = replace(mark_all(d0, gone), lost=gone)
            p = ProcessSample(pid=42, device_index=1, gpu_mem=9 * GIB, sm_util=70.0,
                              name=FORMULA, user="ann\x1b[31m",
                              cmdline=("python", "train.py", "--lr", "3e-4"),
                              job=JobInfo(slurm_job_id="977"),
                              children=(ChildProcess(1, "w", 99.0, 1),
                                        ChildProcess(2, "w", 98.0, 1)))
            w.write(replace(s, devices=(d0, d1), processes=(p,)))


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_one_row_per_time_and_gpu_with_the_main_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec, out = tmp_path / "run.gputop", tmp_path / "gpus.csv"
    run(rec)
    assert main(["export", str(rec), "-o", str(out)]) == 0
    assert "8 rows" in capsys.readouterr().out
    table = rows(out)
    assert [(r["time"], r["gpu"]) for r in table[:3]] == [
        (str(T0 + 0.25), "0"), (str(T0 + 0.25), "1"), (str(T0 + 1.25), "0")]
    first = table[1]
    assert first["time_utc"] == "2027-01-15T08:00:00.250Z"
    assert first["name"].startswith("NVIDIA H100") and first["uuid"]
    assert float(first["util_gpu"]) == 90.0 and int(first["mem_total"]) > 79 * GIB
    assert first["fan"] == ""  # no value: an empty cell
    assert first["throttle"] == "sw_power_cap;sw_thermal"
    lost = table[-2]
    assert lost["gpu"] == "0" and lost["lost"] == "True" and lost["util_gpu"] == ""


def test_processes_one_row_per_time_and_process_and_text_stays_text(tmp_path: Path) -> None:
    rec, out = tmp_path / "run.gputop", tmp_path / "procs.csv"
    run(rec)
    assert main(["export", str(rec), "-o", str(out), "--processes"]) == 0
    table = rows(out)
    assert len(table) == 4
    r = table[0]
    assert (r["gpu"], r["pid"], r["workers"], r["job"]) == ("1", "42", "2", "slurm:977")
    assert r["command"] == "python train.py --lr 3e-4" and int(r["gpu_mem"]) == 9 * GIB
    assert r["name"] == "'" + FORMULA  # a spreadsheet shows it, does not run it
    assert r["user"] == "ann\\x1b[31m"


def test_parquet_has_typed_columns_and_nulls(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rec, out = tmp_path / "run.gputop", tmp_path / "gpus.parquet"
    run(rec)
    assert main(["export", str(rec), "-o", str(out)]) == 0
    t = pq.read_table(out)
    assert t.num_rows == 8
    assert str(t.schema.field("util_gpu").type) == "double"
    assert str(t.schema.field("mem_total").type) == "int64"
    first = t.slice(1, 1).to_pylist()[0]
    assert first["fan"] is None and first["lost"] is False and first["gpu"] == 1
    assert main(["export", str(rec), "-o", str(tmp_path / "p.parquet"), "--processes"]) == 0
    assert pq.read_table(tmp_path / "p.parquet").to_pylist()[0]["name"] == FORMULA


def test_parquet_without_pyarrow_says_what_to_install(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    rec = tmp_path / "run.gputop"
    run(rec, ticks=1)
    assert main(["export", str(rec), "-o", str(tmp_path / "x.parquet")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gputop: ") and "pip install pyarrow" in err and err.count("\n") == 1
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("out, content, message", [
    ("x.xlsx", b"", "name the output OUT.csv or OUT.parquet"),
    ("x.csv", b"not a recording", "is not a gputop recording"),
    ("no-such-dir/x.csv", None, "cannot write"),
])
def test_mistakes_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      out: str, content: bytes | None, message: str) -> None:
    rec = tmp_path / "run.gputop"
    if content is None:
        run(rec, ticks=1)
    else:
        rec.write_bytes(content)
    assert main(["export", str(rec), "-o", str(tmp_path / out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gputop: ") and message in err and err.count("\n") == 1
