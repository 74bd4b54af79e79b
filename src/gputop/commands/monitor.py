"""`gputop [options]`: the live dashboard, one snapshot (--once, --json), or a recording
(--record, headless without a terminal or with --headless)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

from gputop import __version__
from gputop.commands import config
from gputop.commands.args import add_display_args, device_list, positive, size, web_address
from gputop.commands.complete import SHELLS, completion_script, manpage
from gputop.commands.web import in_browser, serve
from gputop.errors import GputopError, RecordingError
from gputop.feeds import GcSettings, one_malloc_arena, settle_gc, unsettle_gc
from gputop.feeds.live import live_poller
from gputop.safetext import encodable_tree, printable
from gputop.ui.view.status import use_thresholds

# Imported where they are used: `--once` needs neither the diagnostics, nor asyncio, nor the
# recording, and the dashboard loads them in a thread while Textual loads.
if TYPE_CHECKING:
    from gputop.feeds import PolledFeed
    from gputop.feeds.tee import RecordingTee
    from gputop.model import Snapshot
    from gputop.recording.writer import RecordingWriter
    from gputop.sources.cpu_start import CpuStart

T = TypeVar("T")
ONCE_TIMEOUT_S = 30.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop",
        description="A live terminal GPU monitor for people who train models.",
        epilog="Without a terminal on stdout, gputop prints one snapshot (as --once) and exits. "
               "Commands: gputop replay FILE | report FILE | import -o OUT FILES | plan ... | "
               "serve [--metrics ADDR:PORT] | fleet --prometheus URL | export FILE -o OUT",
    )
    p.add_argument("--version", action="version", version=f"gputop {__version__}")
    p.add_argument("--once", action="store_true", help="print one snapshot as a table and exit")
    p.add_argument("--json", action="store_true",
                   help="with --once: print the snapshot as JSON (docs/json.md)")
    p.add_argument("--interval", type=positive, default=1.0, metavar="SECONDS",
                   help="seconds between polls (default 1)")
    p.add_argument("--devices", type=device_list, default=None, metavar="LIST",
                   help="only these GPU indexes, e.g. 0,1,4-7")
    p.add_argument("--record", metavar="FILE",
                   help="write every snapshot to FILE (docs/recording.md); headless when stdout "
                        "is not a terminal or with --headless")
    p.add_argument("--headless", action="store_true", help="with --record: no dashboard")
    p.add_argument("--record-max-size", type=size, default=None, metavar="SIZE",
                   help="with --record: before FILE would pass SIZE (e.g. 500M, 2G), finish it "
                        "and go on in FILE.1, FILE.2, ...")
    p.add_argument("--record-keep", type=int, default=None, metavar="K",
                   help="with --record-max-size: keep only the newest K files, deleting older ones")
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help="stop after N snapshots (headless recording)")
    p.add_argument("--demo", action="store_true",
                   help="play the bundled recording of an 8-GPU training node (no GPU needed)")
    p.add_argument("--readonly", action=argparse.BooleanOptionalAction, default=False,
                   help="never offer to kill a process")
    p.add_argument("--layout", choices=config.LAYOUTS, default="auto",
                   help="the GPUs as one line each (compact) or as cards (default: auto, by "
                        "the terminal's size; v changes it)")
    add_display_args(p, "the dashboard")
    p.add_argument("--print-config", action="store_true",
                   help="print the settings in force (the config file, then these flags) and "
                        f"exit; the file: {config.config_path()}")
    p.add_argument("--completion", choices=SHELLS, metavar="SHELL",
                   help="print the shell completion script for bash, zsh or fish and exit")
    p.add_argument("--man", action="store_true", help="print the man page (roff) and exit")
    return p













def _draw_plain_frame(snap: Snapshot, out: TextIO) -> bool:
    """The snapshot as `--once` prints it, cut to the terminal, on the alternate screen (which
    the dashboard takes over and leaves on exit). False when there is no terminal to draw on."""
    from gputop.ui.view.table import render

    try:
        cols, rows = os.get_terminal_size(out.fileno())
    except (OSError, ValueError):
        return False
    lines = [line[:cols] for line in render(snap).splitlines()[:rows]]
    out.write("\x1b[?1049h\x1b[H\x1b[2J" + "\r\n".join(lines))
    out.flush()
    return True


def _leave_plain_frame(out: TextIO) -> None:
    out.write("\x1b[?1049l")
    out.flush()


class _Started:
    """`fn` running in a daemon thread from now on; `result` waits for it (an NVML call can hang
    on a sick GPU) and raises what it raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True,
                                        name="gputop-start")
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            self._box["error"] = e

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise GputopError(f"the GPU driver did not answer within {timeout:.0f} s",
                              hint="a GPU may be hung; check `dmesg` for Xid errors")
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


class _Repeated:
    """`fn` run again and again in one daemon thread, each run when `call` asks for it; `call`
    waits for it as `_Started.result` does. A recorder polls every second for days: one thread
    for the run, not one a tick."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._asked = threading.Event()
        self._done = threading.Event()
        self._box: dict[str, Any] = {}
        threading.Thread(target=self._run, daemon=True, name="gputop-poll").start()

    def _run(self) -> None:
        while True:
            self._asked.wait()
            self._asked.clear()
            try:
                self._box = {"value": self._fn()}
            except BaseException as e:  # handed to the caller's thread
                self._box = {"error": e}
            self._done.set()

    def call(self, timeout: float) -> Any:
        self._done.clear()
        self._asked.set()
        if not self._done.wait(timeout):
            raise GputopError(f"the GPU driver did not answer within {timeout:.0f} s",
                              hint="a GPU may be hung; check `dmesg` for Xid errors")
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


def _call_with_timeout(fn: Callable[[], T], timeout: float) -> T:
    """NVML calls can hang on a sick GPU; a one-shot must still end."""
    result: T = _Started(fn).result(timeout)
    return result


def run_once(args: argparse.Namespace, out: TextIO, cpu_start: CpuStart | None = None) -> int:
    """One snapshot, printed. `cpu_start`: the CPU times read as gputop started, from which the
    CPU shares are measured (else from a reading taken once the GPUs are open)."""
    from gputop.ui.view.table import render

    if args.demo:
        from gputop.feeds.playback import demo_feed

        feed = demo_feed(args.interval, args.devices)
        feed.skip(120)  # two minutes in: training is running
        snap = feed.poll_once()
    else:
        # The table reads what it shows; --json is the whole Snapshot.
        poller = live_poller(args.devices, brief=not args.json)
        try:
            # Rates need two readings of their counters: the first is taken now and the second
            # by the poll, with no poll in between. The wait is the host's CPU share's (0.2 s
            # from `cpu_start`, which it mostly is already), and the first slow tick runs in it.
            ready = _call_with_timeout(lambda: poller.prime(cpu_start), ONCE_TIMEOUT_S)
            time.sleep(max(0.0, ready - time.time()))
            snap = _call_with_timeout(poller.poll_once, ONCE_TIMEOUT_S)
        finally:
            poller.close()
    if args.json:
        json.dump(encodable_tree(snap.to_dict()), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render(snap))
    return 0


def open_recording(args: argparse.Namespace, meta: dict[str, Any]) -> RecordingWriter:
    """The RecordingWriter of --record, --record-max-size and --record-keep."""
    from gputop.recording.writer import RecordingWriter
    from gputop.report.summary import SummaryKeeper  # the diagnostics, only when recording

    return RecordingWriter(args.record, meta=meta, max_bytes=args.record_max_size,
                           keep=args.record_keep, summarizer=SummaryKeeper())


def run_record_headless(args: argparse.Namespace, err: TextIO) -> int:
    one_malloc_arena()
    feed: PolledFeed
    if args.demo:
        from gputop.feeds.playback import demo_feed

        feed = demo_feed(args.interval, args.devices)
    else:
        feed = live_poller(args.devices)
    meta = {"interval": args.interval, "argv": sys.argv[1:], "host": socket.gethostname()}
    try:
        writer = open_recording(args, meta)
    except RecordingError:
        feed.close()
        raise
    stop = threading.Event()
    lost: set[int] = set()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    err.write(f"gputop: recording to {args.record} every {args.interval:g} s "
              "(Ctrl-C to stop)\n")
    failed: RecordingError | None = None
    gc_was: GcSettings | None = None
    try:
        next_at = time.monotonic()
        poll = _Repeated(feed.poll_once)
        while not stop.is_set() and (args.count is None or writer.ticks < args.count):
            snap = poll.call(ONCE_TIMEOUT_S)
            writer.write(snap)
            if writer.ticks == 1 and gc_was is None:
                gc_was = settle_gc()  # the first tick loaded the rest: start-up is over
            for line in newly_lost(snap, lost):
                err.write(f"gputop: {line}\n")
                err.flush()
            next_at += args.interval
            stop.wait(max(0.0, next_at - time.monotonic()))
    except KeyboardInterrupt:
        pass
    except RecordingError as e:  # a full disk: the file keeps every tick before it
        failed = e
    finally:
        feed.close()
        failed = _close_recording(writer, failed)
        if gc_was is not None:  # as it was: main() may be called again in one process
            unsettle_gc(gc_was)
    if failed is not None:
        raise failed  # main prints it as the one line
    files = writer.segments
    where = (str(files[0]) if len(files) == 1
             else f"{len(files)} files, {files[0]} to {files[-1].name}")
    err.write(f"gputop: {writer.ticks} snapshots, {writer.bytes_written} bytes in {where}\n")
    return 0


def newly_lost(snap: Snapshot, known: set[int]) -> list[str]:
    """One line for each GPU of `snap` lost since the GPUs in `known` (which it updates)."""
    lines = []
    for d in snap.devices:
        if d.lost is None or d.index in known:
            continue
        known.add(d.index)
        since = d.lost.since if d.lost.since is not None else snap.time
        why = f" ({printable(d.lost.detail)})" if d.lost.detail else ""
        name = f" ({printable(d.name)})" if d.name else ""
        lines.append(f"GPU {d.index}{name} fell off the bus at "
                     f"{time.strftime('%H:%M:%S', time.localtime(since))}{why}; "
                     "recording the other GPUs")
    return lines


def run_dashboard(args: argparse.Namespace) -> int:
    # Textual takes a good part of a second to load. So the GPUs are opened and polled first (in
    # a thread: a sick GPU can hang a call), and that poll is drawn at once as a plain table on
    # the alternate screen: its GPUs as soon as NVML has answered, then its processes' users,
    # commands and CPU once the host is read. The dashboard then replaces it with the same
    # snapshot. The diagnostics load in that thread, after the poll, while Textual loads here.
    one_malloc_arena()
    polled = threading.Event()
    plain: list[bool] = []  # whether a plain frame is on the screen (once one was drawn)

    def draw(snap: Snapshot) -> None:
        if not plain:
            plain.append(_draw_plain_frame(snap, sys.stdout))
        elif plain[0]:
            _draw_plain_frame(snap, sys.stdout)
        polled.set()

    def start() -> tuple[PolledFeed, Any]:
        if args.demo:
            from gputop.feeds.playback import demo_feed

            polled.set()
            from gputop.diagnose import default_engine

            return demo_feed(args.interval, args.devices), default_engine()
        poller = live_poller(args.devices, background=True)
        try:
            draw(poller.poll_ahead(on_gpus=draw))
            from gputop.diagnose import default_engine

            return poller, default_engine()
        except BaseException:
            poller.close()
            raise
        finally:
            polled.set()

    started = _Started(start)
    polled.wait(ONCE_TIMEOUT_S)
    try:
        from gputop.feeds.diagnosed import DiagnosedFeed
        from gputop.ui.app import GputopApp

        feed, engine = started.result(ONCE_TIMEOUT_S)
        writer = None
        tee: RecordingTee | None = None
        if args.record:  # the recording's modules only then
            from gputop.feeds.tee import RecordingTee

            try:
                writer = open_recording(args, {"interval": args.interval})
            except RecordingError:
                feed.close()
                raise
            feed = tee = RecordingTee(feed, writer)
    except BaseException:
        if plain and plain[0]:
            _leave_plain_frame(sys.stdout)
        raise
    from gputop.diagnose import default_engine  # loaded by `start` already

    diagnosed = DiagnosedFeed(feed, engine, new_engine=default_engine)
    if args.demo:  # the findings of one pass of the demo do not run into the next
        demo = tee.feed if tee is not None else feed
        demo.on_loop = diagnosed.reset  # type: ignore[union-attr]
    failed: RecordingError | None = None
    try:
        # The demo's processes exist only in the recording: nothing to kill.
        app = GputopApp(diagnosed, interval=args.interval, readonly=args.readonly or args.demo,
                        mouse=not args.no_mouse, ansi=args.ansi, theme=args.theme,
                        layout=None if args.layout == "auto" else args.layout,
                        title_suffix=" (demo recording)" if args.demo else "")
        diagnosed.listener = app.set_findings
        app.run(mouse=not args.no_mouse)
    finally:
        diagnosed.close()
        if writer is not None:
            failed = _close_recording(writer, tee.failed if tee is not None else None)
    if failed is not None:
        raise failed  # the dashboard said so while it ran; the shell gets the one line too
    return 0


def _close_recording(writer: Any, failed: RecordingError | None) -> RecordingError | None:
    """Closes the recording; the first error of writing it, if any (a full disk)."""
    try:
        writer.close()
    except RecordingError as e:
        return failed or e
    return failed


def main(argv: list[str], *, cpu_start: CpuStart | None = None, program: bool = False) -> int:
    """`gputop [options]`: the dashboard, one snapshot (--once), or a recording (--record).
    `cpu_start`: the CPU times read as gputop started, for a one-shot (commands.main).
    `program`: this is the gputop process itself (not a caller in Python), which a one-shot
    ends as soon as its snapshot is out."""
    parser = build_parser()
    config.apply(parser, settings := config.load())
    args = parser.parse_args(argv)
    if args.print_config:
        sys.stdout.write(config.render(args, settings))
        return 0
    if args.completion:
        sys.stdout.write(completion_script(args.completion))
        return 0
    if args.man:
        sys.stdout.write(manpage(build_parser()))
        return 0
    if args.web is not None and not in_browser():
        return serve(argv, web_address(parser, args.web), "gputop", sys.stderr)
    use_thresholds(settings.thresholds)
    if args.json and not args.once and sys.stdout.isatty():
        parser.error("--json needs --once (or a pipe)")
    if args.record_max_size is not None and not args.record:
        parser.error("--record-max-size needs --record")
    if args.record_keep is not None and (args.record_max_size is None or args.record_keep < 1):
        parser.error("--record-keep needs --record-max-size and a count of at least 1")
    tty = (sys.stdout.isatty() and sys.stdin.isatty()) or in_browser()
    if args.record and (args.headless or not tty):
        return run_record_headless(args, sys.stderr)
    if args.once or args.json or not tty:
        code = run_once(args, sys.stdout, cpu_start)
        if program:
            _exit_now(code)
        return code
    return run_dashboard(args)


def _exit_now(code: int) -> NoReturn:
    """Ends the process without the interpreter's teardown, which frees every object of every
    module one by one (some 30 ms after a one-shot): the output is flushed and the GPUs were
    closed, so nothing is left for it to do."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
