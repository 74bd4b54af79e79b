"""A headless recorder polls and writes each tick in its poll thread. Ctrl-C reaches the main
thread at any moment of a tick: a tick being written is finished before the file is closed, and
one still being polled is never written into the closed file."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gputop.commands.main import main
from gputop.feeds import playback
from gputop.recording import RecordingWriter, read_recording

WRITTEN_BEFORE = 2


def _interrupt() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: the main thread raises KeyboardInterrupt
    time.sleep(0.3)  # the main thread closes the file meanwhile, if nothing holds it back


@pytest.mark.parametrize("during", ["poll", "write"])
def test_ctrl_c_mid_tick_keeps_every_tick_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                during: str) -> None:
    late: list[bool] = []  # for each write: whether the file was closed already
    write = RecordingWriter.write

    def watched(self: RecordingWriter, snap: Any) -> None:
        if during == "write" and self.ticks == WRITTEN_BEFORE:
            _interrupt()
        late.append(self._f.closed)
        write(self, snap)

    demo_feed = playback.demo_feed

    def feed(*args: Any) -> Any:
        inner = demo_feed(*args)
        polls = [0]
        poll_once = inner.poll_once

        def poll() -> Any:
            polls[0] += 1
            if during == "poll" and polls[0] == WRITTEN_BEFORE + 1:
                _interrupt()
            return poll_once()

        inner.poll_once = poll  # type: ignore[method-assign]
        return inner

    monkeypatch.setattr(RecordingWriter, "write", watched)
    monkeypatch.setattr(playback, "demo_feed", feed)
    out = tmp_path / "run.gputop"
    assert main(["--demo", "--record", str(out), "--headless", "--count", "5",
                 "--interval", "0.01"]) == 0
    for t in threading.enumerate():  # the poll thread's tick in flight, done with
        if t.name == "gputop-poll":
            t.join(timeout=2)
    time.sleep(0.5)
    kept = WRITTEN_BEFORE + (during == "write")
    assert late == [False] * kept
    assert len(read_recording(out).snapshots) == kept
