"""A finished recording ends with its summary, and `gputop report` reads that instead of every
tick: the text, JSON and HTML it prints are the ones reading every tick gives. A recording
without one (killed, still being written, older, damaged) is read tick by tick, saying why."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from gputop.commands.report import main
from gputop.diagnose import default_engine
from gputop.diagnose.engine import Engine
from gputop.diagnose.rules import BUILTIN
from gputop.feeds.playback import demo_path
from gputop.recording import (
    FOOTER_SIZE,
    RecordingReader,
    RecordingWriter,
    read_recording,
    read_summary,
    summary_place,
    to_record,
)
from gputop.recording.format import footer
from gputop.recording.index import RecordingIndex
from gputop.report.summary import SummaryKeeper, from_summaries
from gputop.report.table import export
from gputop.testing.synthetic import series

NOTE = ": reading the recording tick by tick\n"


@pytest.fixture(scope="module")
def demo() -> list[Any]:
    return read_recording(demo_path()).snapshots


def record(path: Path, snaps: list[Any], **kw: Any) -> RecordingWriter:
    path.parent.mkdir(parents=True, exist_ok=True)
    with RecordingWriter(path, **kw, summarizer=SummaryKeeper()) as w:
        for s in snaps:
            w.write(s)
    return w


def ticks_end(path: Path) -> int:
    return int(json.loads(gzip.decompress(path.read_bytes()[-FOOTER_SIZE:]))["summary_at"])


def without_summary(src: Path, dst: Path) -> Path:
    """The same file as a writer that did not append a summary (an older gputop) leaves it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes()[:ticks_end(src)])
    return dst


def report(files: list[Path], *extra: str, tmp: Path | None = None) -> tuple[str, str, str]:
    """(stdout, the HTML page or "", stderr) of `gputop report`, with the file names taken out
    so that two copies of a recording can be compared."""
    out, err = io.StringIO(), io.StringIO()
    html = tmp / f"{files[0].name}-{len(list(tmp.iterdir()))}.html" if tmp else None
    args = [str(f) for f in files] + list(extra) + (["--html", str(html)] if html else [])
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(args) == 0
    page = html.read_text(encoding="utf-8") if html else ""
    names = {str(f) for f in files} | {f.name for f in files}
    if html:
        names |= {str(html), html.name}
    text = out.getvalue()
    for name in sorted(names, key=len, reverse=True):
        text, page = text.replace(name, "FILE"), page.replace(name, "FILE")
    return text, page, err.getvalue()


def assert_same_reports(fast: list[Path], slow: list[Path], tmp: Path, *,
                        text: bool = True) -> None:
    for extra in (((),) if text else ()) + (("--json",),):
        got, got_page, err = report(fast, *extra, tmp=tmp)
        assert err == ""  # read from the summaries: nothing to say
        want, want_page, why = report(slow, *extra, tmp=tmp)
        assert why.endswith(NOTE)  # read tick by tick
        assert got == want
        assert got_page == want_page and '<path class="line"' in got_page


def test_the_demo_rewritten_reports_the_same_from_its_summary(
        tmp_path: Path, demo: list[Any]) -> None:
    rec = record(tmp_path / "a" / "demo.gputop", demo).path
    old = without_summary(rec, tmp_path / "b" / "demo.gputop")
    (tmp_path / "html").mkdir()
    assert_same_reports([rec], [old], tmp_path / "html")
    doc = json.loads(report([rec], "--json")[0])
    assert doc["ticks"] == 600 and doc["warning"] is None
    assert {f["id"] for f in doc["findings"]} >= {"thermal.sw", "mem.growth", "nvlink.errors"}


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory, demo: list[Any]) -> list[Path]:
    """The demo recorded as files of at most 450 kB."""
    w = record(tmp_path_factory.mktemp("segments") / "run.gputop", demo, max_bytes=450_000)
    return w.segments


def test_a_run_in_segments_reports_the_same_from_their_summaries(
        tmp_path: Path, segments: list[Path]) -> None:
    files = segments
    assert len(files) >= 3 and all(f.stat().st_size <= 450_000 for f in files)
    assert all(read_summary(f)["segment"] == n for n, f in enumerate(files))
    old = [without_summary(f, tmp_path / "b" / f.name) for f in files]
    (tmp_path / "html").mkdir()
    assert_same_reports([files[0]], [old[0]], tmp_path / "html", text=False)
    # Given as a shell glob, in any order: the same again.
    assert report(list(reversed(files)), "--json")[0] == report([files[0]], "--json")[0]
    # Findings that span the files are one finding each, as when reading every tick.
    doc = json.loads(report([files[0]], "--json")[0])
    boundary = read_summary(files[0])["recap"]["end"]
    assert any(f["start"] < boundary and (f["end"] or doc["end"]) > boundary
               for f in doc["findings"])


def test_a_recording_killed_mid_write_is_read_tick_by_tick_and_finds_the_same(
        tmp_path: Path, demo: list[Any]) -> None:
    done = record(tmp_path / "done.gputop", demo[:120]).path
    # never closed, as after SIGKILL
    killed = RecordingWriter(tmp_path / "killed.gputop", summarizer=SummaryKeeper())
    for s in demo[:120]:
        killed.write(s)
    got, _, err = report([killed.path], "--json")
    assert err.splitlines()[0] == (
        "gputop: killed.gputop has no summary (it was cut short, is still being written, or "
        "was written by an older gputop): reading the recording tick by tick")
    want = json.loads(report([done], "--json")[0])
    doc = json.loads(got)
    assert doc["warning"] and "end marker" in doc["warning"]
    assert (doc["ticks"], doc["findings"], doc["devices"]) == (
        want["ticks"], want["findings"], want["devices"])
    killed.close()


def test_a_run_in_segments_killed_in_its_last_file_reads_only_that_file_tick_by_tick(
        tmp_path: Path, demo: list[Any]) -> None:
    (tmp_path / "a").mkdir()
    w = RecordingWriter(tmp_path / "a" / "run.gputop", max_bytes=450_000,
                        summarizer=SummaryKeeper())
    for s in demo:
        w.write(s)  # and never closed, as after SIGKILL
    files = w.segments
    assert len(files) >= 3 and all(summary_place(f) for f in files[:-1])
    assert summary_place(files[-1]) is None
    old = [without_summary(f, tmp_path / "b" / f.name) for f in files[:-1]]
    old.append(tmp_path / "b" / files[-1].name)
    old[-1].write_bytes(files[-1].read_bytes())
    (tmp_path / "html").mkdir()
    got, got_page, err = report([files[0]], "--json", tmp=tmp_path / "html")
    assert err.splitlines()[0] == (
        f"gputop: {files[-1].name} has no summary (it was cut short, is still being written, "
        "or was written by an older gputop): reading its ticks")
    want, want_page, why = report([old[0]], "--json", tmp=tmp_path / "html")
    assert why.splitlines()[0].endswith(NOTE.strip())
    assert got == want and got_page == want_page
    doc = json.loads(got)
    assert doc["ticks"] == 600 and "end marker" in doc["warning"]
    # A finding open when the file before ended goes on in the last one: one finding.
    boundary = read_summary(files[-2])["recap"]["end"]
    assert any(f["start"] < boundary < (f["end"] or doc["end"]) for f in doc["findings"])
    w.close()


def test_with_the_first_files_deleted_the_rest_is_read_tick_by_tick(
        tmp_path: Path, segments: list[Path]) -> None:
    kept = []
    for f in segments[1:]:  # what --record-keep leaves
        kept.append(tmp_path / f.name)
        kept[-1].write_bytes(f.read_bytes())
    _, _, err = report([tmp_path / "run.gputop"])
    assert err == ("gputop: run.gputop.1 is not the first file of its run (an earlier one was "
                   "deleted); its summary covers them: reading the recording tick by tick\n")


def test_a_segment_too_small_for_its_summary_goes_without(tmp_path: Path) -> None:
    w = record(tmp_path / "run.gputop", series(60, 2), max_bytes=1500)
    assert len(w.segments) >= 3 and all(f.stat().st_size <= 1500 for f in w.segments)
    assert isinstance(from_summaries(str(w.segments[0]), Engine(BUILTIN)), str)
    assert json.loads(report([w.segments[0]], "--json")[0])["ticks"] == 60


def test_every_reader_of_the_ticks_reads_a_file_with_a_summary_as_one_without(
        tmp_path: Path, demo: list[Any]) -> None:
    rec = record(tmp_path / "a" / "demo.gputop", demo[:120]).path
    old = without_summary(rec, tmp_path / "b" / "demo.gputop")
    # gzip and a JSON parser (docs/recording.md): one stream, the summary and its footer last.
    lines = [json.loads(x) for x in gzip.decompress(rec.read_bytes()).splitlines()]
    assert lines[0]["type"] == "header" and all("k" in x or "d" in x for x in lines[1:121])
    assert "summary" in lines[121] and set(lines[122]) == {"summary_at", "summary_bytes"}
    assert len(lines) == 123
    for path in (rec, old):
        r = RecordingReader(path)
        assert list(r) == demo[:120] and r.warning is None
        with RecordingIndex(path) as index:
            reader = index.reader()
            assert index.ticks == 120 and index.warning is None and index.finished
            assert [reader.snapshot(i) for i in (119, 0, 60)] == [demo[119], demo[0], demo[60]]
            reader.close()
    exported = []
    for path in (rec, old):
        out = path.with_suffix(".csv")
        assert export(str(path), str(out)) == (120 * 8, None)
        with open(out, newline="", encoding="utf-8") as f:
            exported.append(list(csv.reader(f)))
    assert exported[0] == exported[1]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory,
              demo: list[Any]) -> tuple[Path, dict[str, Any]]:
    """A recording with its summary, and its report read tick by tick."""
    d = tmp_path_factory.mktemp("short")
    rec = record(d / "a" / "run.gputop", demo[:150]).path
    want = json.loads(report([without_summary(rec, d / "b" / "run.gputop")], "--json")[0])
    assert want["findings"]
    return rec, want


def rewrite_summary(path: Path, change: Any) -> None:
    """Replaces the file's summary by `change(summary)`, with a footer that matches it."""
    at = ticks_end(path)
    body = change(read_summary(path))
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    member = z.compress(json.dumps({"summary": body}).encode() + b"\n") + z.flush()
    path.write_bytes(path.read_bytes()[:at] + member + footer(at, len(member)))


def flip(path: Path, where: int) -> None:
    data = bytearray(path.read_bytes())
    data[where:where + 6] = b"\xff" * 6
    path.write_bytes(bytes(data))


def other_rules(s: dict[str, Any]) -> dict[str, Any]:
    return {**s, "signature": {**s["signature"], "code": "0" * 16}}


def bad_recap(s: dict[str, Any]) -> dict[str, Any]:
    s["recap"]["devices"]["0"]["counts"]["util_pct"] = [[50.0], [1, 2]]
    return s


def bad_finding(s: dict[str, Any]) -> dict[str, Any]:
    s["findings"][0]["start"] = "yesterday"
    return s


@pytest.mark.parametrize("damage, why", [
    (lambda p: p.write_bytes(p.read_bytes()[:-7]), "has no summary"),
    (lambda p: flip(p, ticks_end(p) + 40), "summary is damaged"),
    (lambda p: flip(p, p.stat().st_size - FOOTER_SIZE + 30), "has no summary"),
    (lambda p: p.write_bytes(p.read_bytes()[:ticks_end(p)] + footer(ticks_end(p), 9)),
     "summary footer is damaged"),
    (lambda p: rewrite_summary(p, other_rules), "diagnosed by other rules (gputop 0."),
    (lambda p: rewrite_summary(p, bad_recap), "summary is damaged"),
    (lambda p: rewrite_summary(p, bad_finding), "summary findings are damaged"),
], ids=["footer cut", "summary flipped", "footer flipped", "footer points elsewhere",
        "other rules", "recap damaged", "finding damaged"])
def test_a_damaged_or_foreign_summary_is_never_trusted(
        tmp_path: Path, short_run: tuple[Path, dict[str, Any]], damage: Any, why: str) -> None:
    rec = tmp_path / "run.gputop"
    rec.write_bytes(short_run[0].read_bytes())
    damage(rec)
    got, _, err = report([rec], "--json")
    note = err.splitlines()[0]
    assert note.startswith("gputop: run.gputop") and why in note and note.endswith(NOTE.strip())
    doc, want = json.loads(got), short_run[1]
    assert (doc["ticks"], doc["findings"], doc["devices"]) == (
        want["ticks"], want["findings"], want["devices"])


@pytest.mark.parametrize("split", [65_535, 65_536, 65_537])
def test_a_gzip_member_that_ends_at_a_read_boundary_is_read_on_from(
        tmp_path: Path, split: int) -> None:
    """The reader inflates 64 KiB at a time: the next member's magic may be cut by a read."""
    snaps = series(2, 1)
    header = b'{"type":"header","format":"gputop-recording","version":1,"meta":{}}\n'

    def member(data: bytes) -> bytes:
        z = zlib.compressobj(0, zlib.DEFLATED, 31)  # stored: its size follows the data's
        return z.compress(data) + z.flush()

    def tick(s: Any) -> bytes:
        return json.dumps({"k": to_record(s)}).encode() + b"\n"

    first = header + tick(snaps[0])
    pad = split - len(first) - 64  # about right: a stored block adds a few bytes
    while len(member(first + b'{"x":"' + b"." * pad + b'"}\n')) < split:
        pad += 1
    one = member(first + b'{"x":"' + b"." * pad + b'"}\n')
    assert len(one) == split
    path = tmp_path / "two-members.gputop"
    path.write_bytes(one + member(tick(snaps[1])))
    r = RecordingReader(path)
    assert list(r) == snaps  # the padding line is a kind gputop does not read, and said so
    assert r.warning == f"{path}: 1 line of a kind this gputop does not read (a newer " \
        "gputop's, or damage) skipped"


def test_an_engine_taken_up_from_its_saved_state_goes_on_as_if_it_never_stopped(
        demo: list[Any]) -> None:
    whole = default_engine().run(demo)
    first = default_engine()
    for s in demo[:250]:  # in the starved phase: findings open and pending
        first.update(s)
    state = json.loads(json.dumps(first.state()))  # as a summary keeps it
    assert state["tracks"] and state["window_from"] == demo[0].time  # a 10-minute window
    second = default_engine()
    second.restore(state, [s for s in demo[:250] if s.time >= state["window_from"]])
    assert second.run(demo[250:]) == whole
    with pytest.raises(IndexError):
        default_engine().restore({**state, "running": [99]}, [])
