"""A recording that parses but is malformed, huge or not a file is read up to the damage, with a
warning, by every reader and in every output form: never a traceback, never a hang."""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
import os
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputop.commands.main import main
from gputop.diagnose import Engine
from gputop.recording import RecordingWriter
from gputop.recording.checks import MAX_LINE
from gputop.recording.index import RecordingIndex
from gputop.replay.control import ReplayFeed
from gputop.testing.synthetic import series
from tests.helpers.waiting import until, within

READERS = [["report"], ["report", "--json"], ["report", "--html", "OUT.html"],
           ["export", "-o", "OUT.csv"], ["replay", "--once"]]


def ticks_of(tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A clean recording's header and lines (30 ticks, keyframes every 10)."""
    path = tmp_path / "good.gputop"
    with RecordingWriter(path, keyframe_every=10) as w:
        for s in series(30, 4):
            w.write(s)
    lines = gzip.decompress(path.read_bytes()).splitlines()
    return json.loads(lines[0]), [json.loads(x) for x in lines[1:]]


def written(path: Path, header: Any, lines: list[Any]) -> Path:
    raw = [x if isinstance(x, bytes) else json.dumps(x).encode() for x in [header, *lines]]
    path.write_bytes(gzip.compress(b"\n".join(raw) + b"\n"))
    return path


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    argv = tuple(str(tmp_path / a) if a.startswith("OUT.") else a for a in argv)
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def last_tick_is_10th(tmp_path: Path, reader: list[str], out: str) -> None:
    """What each reader shows of a file whose 11th tick is damaged: the first 10 ticks."""
    if reader == ["report", "--json"]:
        assert json.loads(out)["ticks"] == 10
    elif reader[0] == "export":
        assert len((tmp_path / "OUT.csv").read_text().splitlines()) == 1 + 10 * 4
    elif reader == ["report"]:
        assert "10 ticks" in out


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(tick: dict[str, Any]) -> None:
        obj = tick["k"]
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
    return edit


MALFORMED = {
    "time of 1e999": _set(("time",), float("inf")),
    "time of NaN": _set(("time",), float("nan")),
    "time as text": _set(("time",), "soon"),
    "index as text": _set(("devices", "1", "index"), "one"),
    "pid as text": lambda t: next(iter(t["k"]["processes"].values())).update(pid="x"),
    "xids as text": _set(("devices", "1", "xids"), "boom"),
    "lost as text": _set(("devices", "1", "lost"), "yes"),
    "unavailable as text": _set(("devices", "1", "unavailable"), "x"),
    "host as text": _set(("host",), "x"),
    "devices as a list": _set(("devices",), [1, 2]),
    "utilization as text": _set(("devices", "1", "util_gpu"), "hot"),
}


@pytest.mark.parametrize("reader", READERS, ids=" ".join)
@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_tick_is_read_up_to_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
        reader: list[str]) -> None:
    header, lines = ticks_of(tmp_path)
    lines = copy.deepcopy(lines)
    MALFORMED[case](lines[10])  # the 11th tick, a keyframe
    path = written(tmp_path / "bad.gputop", header, lines)
    rc, out, err = run(capsys, tmp_path, reader[0], str(path), *reader[1:])
    assert rc == 0, err
    if reader[0] != "replay":  # replay --once reads only the last tick: after the damage
        assert "tick 11 is damaged" in err
        last_tick_is_10th(tmp_path, reader, out)
    if reader == ["report", "--json"]:
        assert "tick 11 is damaged" in json.loads(out)["warning"]
    if reader[1:2] == ["--html"]:
        assert "tick 11 is damaged" in (tmp_path / "OUT.html").read_text()


@pytest.mark.parametrize("reader", READERS, ids=" ".join)
@pytest.mark.parametrize("deep", [b"[" * 100_000 + b"]" * 100_000,
                                  b'{"d":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001])
def test_json_nested_100000_deep_is_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           reader: list[str], deep: bytes) -> None:
    header, lines = ticks_of(tmp_path)
    path = written(tmp_path / "deep.gputop", header, [lines[0], deep, *lines[1:]])
    rc, _out, err = run(capsys, tmp_path, reader[0], str(path), *reader[1:])
    assert rc == 0, err
    assert "tick 2 is damaged (nested too deeply)" in err


@pytest.mark.parametrize("version", ["1", True, -5, 0, 2.0, None])
@pytest.mark.parametrize("reader", READERS, ids=" ".join)
def test_a_header_version_that_is_not_a_whole_number_from_1_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], version: Any,
        reader: list[str]) -> None:
    header, lines = ticks_of(tmp_path)
    path = written(tmp_path / "v.gputop", {**header, "version": version}, lines)
    rc, _out, err = run(capsys, tmp_path, reader[0], str(path), *reader[1:])
    assert rc == 1
    assert err == (f"gputop: {path} has a damaged header: its version is "
                   f"{json.dumps(version)}, not a whole number from 1\n")


def test_a_newer_version_is_refused_as_newer(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    header, lines = ticks_of(tmp_path)
    path = written(tmp_path / "v.gputop", {**header, "version": 2}, lines)
    assert run(capsys, tmp_path, "report", str(path))[2] == (
        f"gputop: {path} is a version 2 recording: this gputop reads versions up to 1; "
        "upgrade gputop\n")


def BOMB(head: bytes) -> bytes:
    """`head`, then a 6th line that inflates to 1 GiB, in ~1 MB of gzip (a full flush resets
    the compressor, so every MiB of the line compresses to the same bytes)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    start = z.compress(head + b'\n{"d":{"x":"') + z.flush(zlib.Z_FULL_FLUSH)
    mib = z.compress(b"0" * (1 << 20)) + z.flush(zlib.Z_FULL_FLUSH)
    return start + mib * 1024


@pytest.mark.parametrize("reader", READERS, ids=" ".join)
def test_one_line_that_inflates_to_a_gibibyte_is_damage_read_quickly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: list[str]) -> None:
    header, lines = ticks_of(tmp_path)
    path = tmp_path / "bomb.gputop"
    path.write_bytes(BOMB(b"\n".join(json.dumps(x).encode() for x in [header, *lines[:5]])))
    assert path.stat().st_size < 2 << 20
    t0 = time.monotonic()
    rc, _out, err = run(capsys, tmp_path, reader[0], str(path), *reader[1:])
    assert rc == 0, err
    if reader[0] == "replay":  # the index stops at the first 64 KiB that inflate too far
        assert f"is damaged (64 KiB inflating to more than {MAX_LINE >> 20} MiB)" in err
    else:
        assert f"tick 6 is damaged (a line longer than {MAX_LINE >> 20} MiB)" in err
    assert time.monotonic() - t0 < 15


@pytest.mark.parametrize("reader", READERS, ids=" ".join)
def test_a_fifo_is_refused_in_one_line_instead_of_blocking(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: list[str]) -> None:
    fifo = tmp_path / "run.gputop"
    os.mkfifo(fifo)  # no writer ever opens it: opening it to read would block for ever
    rc, _out, err = run(capsys, tmp_path, reader[0], str(fifo), *reader[1:])
    assert rc == 1
    assert err == (f"gputop: {fifo} is a pipe: gputop reads a recording from a file; save it "
                   "first (cat > run.gputop)\n")


def test_a_pipe_from_the_shell_is_refused_in_one_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    r, w = os.pipe()  # what `gputop report <(cat run.gputop)` gives: /dev/fd/N
    try:
        rc, _out, err = run(capsys, tmp_path, "report", f"/dev/fd/{r}")
    finally:
        os.close(r)
        os.close(w)
    assert rc == 1
    assert err.startswith(f"gputop: /dev/fd/{r} is a pipe: ")


def test_a_replay_playing_into_a_tick_damaged_when_decoded_ends_before_it(
        tmp_path: Path) -> None:
    header, lines = ticks_of(tmp_path)
    lines = copy.deepcopy(lines)
    MALFORMED["index as text"](lines[20])  # the 21st tick: its time reads, its GPU does not
    path = written(tmp_path / "bad.gputop", header, lines)

    class View:
        def __init__(self) -> None:
            self.warnings: list[str] = []

        def set_findings(self, findings: Any) -> None: ...
        def edit_history(self, edit: Any) -> None: ...

        def add_warning(self, text: str) -> None:
            self.warnings.append(text)

    async def play() -> tuple[list[float], int, str | None, list[str]]:
        index = RecordingIndex(path)
        assert index.ticks == 30  # the index reads only the times
        feed = ReplayFeed(index, engine=Engine([]))
        feed.view = view = View()
        feed.control.speed = 64.0
        seen: list[float] = []

        async def consume() -> None:
            async for snap in feed.stream(0.001):
                seen.append(snap.time)

        task = asyncio.create_task(consume())
        try:
            await within(until(lambda: bool(view.warnings) and feed.control.at_end
                               and feed.shown == 19))
            return seen, index.ticks, feed.warning, view.warnings
        finally:
            task.cancel()
            feed.close()
            index.close()

    seen, ticks, warning, shown = asyncio.run(play())
    assert ticks == 20 and seen[-1] == 1_800_000_019.0
    assert shown == [f"{path}: tick 21 is damaged (devices 1: index is \"one\", not a whole "
                     "number); the replay ends before it"]
    assert warning is not None and "tick 21 is damaged" in warning
