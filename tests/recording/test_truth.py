"""What a reader says of a recording is true: files of different runs are never merged or dropped
in silence, a damaged file is said to be damaged in every output form (and a summary never
stands for ticks changed after it), a file without a summary says why, and OUT is written
without following a link planted there."""

from __future__ import annotations

import csv
import gzip
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from gputop.commands.main import main
from gputop.recording import RecordingWriter, summary_place
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series

pytestmark = pytest.mark.usefixtures("utc")


def record(path: Path, snaps: list[Any], *, summary: bool = True, **kw: Any) -> Path:
    with RecordingWriter(path, keyframe_every=10, summarizer=SummaryKeeper() if summary else None,
                         **kw) as w:
        for s in snaps:
            w.write(s)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    got = capsys.readouterr()
    return rc, got.out, got.err


# -- files of different runs given together ------------------------------------------------------


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a = record(tmp_path / "a.gputop", series(10, 2))
    b = record(tmp_path / "b.gputop", series(5, 2, start=1_900_000_000.0))
    return a, b


@pytest.mark.parametrize("argv", [["report"], ["report", "--json"], ["replay", "--once"]])
def test_files_of_different_runs_given_together_are_refused(
        two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        argv: list[str]) -> None:
    a, b = two_runs
    rc, out, err = run(capsys, argv[0], b, a, *argv[1:])
    assert (rc, out) == (1, "")
    assert err == (f"gputop: {a} and {b} are different runs: give one run at a time: its "
                   "first file, or all its files\n")


def test_a_glob_over_several_runs_names_them(two_runs: tuple[Path, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    record(tmp_path / "c.gputop", series(3, 2, start=1_700_000_000.0))
    rc, _out, err = run(capsys, "report", *sorted(tmp_path.glob("*.gputop")))
    assert rc == 1 and "are different runs" in err and "(and 1 more)" in err


def test_the_files_of_one_run_given_together_are_one_run(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    path = tmp_path / "run.gputop"
    with RecordingWriter(path, max_bytes=1, summarizer=SummaryKeeper()) as w:  # a file a tick
        for s in series(4, 2):
            w.write(s)
    rc, out, _err = run(capsys, "report", "--json", *w.segments[::-1])
    assert rc == 0 and json.loads(out)["ticks"] == 4


# -- a recording damaged in the middle -----------------------------------------------------------


def exported(capsys: pytest.CaptureFixture[str], path: Path, out: Path) -> tuple[list[Any], str]:
    rc, _, err = run(capsys, "export", path, "-o", out)
    assert rc == 0, err
    with open(out, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))[1:], err


def test_every_single_bit_flip_in_the_ticks_is_said_by_every_reader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = record(tmp_path / "clean.gputop", series(30, 4))
    want, _ = exported(capsys, clean, tmp_path / "clean.csv")
    data = clean.read_bytes()
    at, _ = summary_place(clean) or (0, 0)
    rnd = random.Random(7)
    for n in range(20):
        flipped = bytearray(data)
        where = rnd.randrange(40, at - 8)
        flipped[where] ^= 1 << rnd.randrange(8)
        path = tmp_path / f"flip{n}.gputop"
        path.write_bytes(bytes(flipped))
        rows, export_err = exported(capsys, path, tmp_path / "flip.csv")
        rc, out, err = run(capsys, "report", "--json", path)
        doc = json.loads(out)
        assert rc == 0 and doc["warning"], (where, err)  # never a clean report
        assert "changed since its summary was written" in doc["warning"]
        assert doc["ticks"] * 4 == len(rows), where  # the report reads what export reads
        assert rows == want or "warning" in export_err, where  # changed rows are never silent
        rc, _, err = run(capsys, "report", path, "--html", tmp_path / "flip.html")
        assert "changed since its summary was written" in (tmp_path / "flip.html").read_text()
        rc, out, err = run(capsys, "replay", path, "--once")
        assert rc == 0 if rows else rc == 1
        assert "gputop:" in err


def test_a_delta_whose_kind_was_flipped_is_not_skipped_in_silence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = gzip.decompress(record(tmp_path / "a.gputop", series(30, 4),
                                   summary=False).read_bytes()).splitlines()
    lines[15] = lines[15].replace(b'{"d":', b'{"e":', 1)  # one bit: d (0x64) -> e (0x65)
    path = tmp_path / "b.gputop"
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    for argv in (["export", "-o", str(tmp_path / "b.csv")], ["report"], ["replay", "--once"]):
        rc, _out, err = run(capsys, argv[0], path, *argv[1:])
        assert rc == 0 and "1 line of a kind this gputop does not read" in err, argv


# -- why a file has no summary -------------------------------------------------------------------


def test_a_file_too_small_for_its_summary_says_so(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.gputop"
    rc = main(["--demo", "--record", str(path), "--headless", "--interval", "0.001",
               "--count", "5", "--record-max-size", "64k"])
    assert rc == 0
    capsys.readouterr()
    rc, _out, err = run(capsys, "report", path)
    assert rc == 0
    assert err.splitlines()[0] == (
        "gputop: run.gputop has no summary: it would have taken more than a quarter of the "
        "--record-max-size it was written with: reading the recording tick by tick")
    assert "cut short" not in err
    # gzip readers (zcat) read the footer that says so as one more line
    lines = gzip.decompress(path.read_bytes()).splitlines()
    assert json.loads(lines[-1]) == {"no_summary": "size"}
    assert len(lines) == 1 + 5 + 1


# -- OUT is never written through a link -----------------------------------------------------------


@pytest.mark.parametrize("argv, name", [(["report", "--html"], "out.html"),
                                        (["export", "-o"], "out.csv"),
                                        (["export", "-o"], "out.parquet")])
def test_a_link_planted_at_out_is_replaced_not_followed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], name: str) -> None:
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow.parquet")
    rec = record(tmp_path / "run.gputop", series(5, 2))
    precious = tmp_path / "passwd"
    precious.write_text("root:x:0:0\n")
    out = tmp_path / name
    out.symlink_to(precious)
    rc, _, err = run(capsys, argv[0], rec, argv[1], out)
    assert rc == 0, err
    assert precious.read_text() == "root:x:0:0\n"
    assert out.is_file() and not out.is_symlink() and out.stat().st_size > 100
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["run.gputop", "passwd", out.name])  # no part file left behind


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_out_that_cannot_be_written_is_one_line_and_leaves_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = record(tmp_path / "run.gputop", series(5, 2))
    (tmp_path / "dir.csv").mkdir()
    rc, _out, err = run(capsys, "export", rec, "-o", tmp_path / "dir.csv")
    assert rc == 1 and err == f"gputop: cannot write {tmp_path / 'dir.csv'}: it is a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.csv", "run.gputop"]
