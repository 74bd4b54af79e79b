"""The `gputop` command."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from gputop import __version__
from gputop.errors import GputopError, RecordingError
from gputop.model import Snapshot

ONCE_TIMEOUT_S = 30.0
EXIT_INTERRUPTED = 130


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
    p.add_argument("--interval", type=_positive, default=1.0, metavar="SECONDS",
                   help="seconds between polls (default 1)")
    p.add_argument("--devices", type=_device_list, default=None, metavar="LIST",
                   help="only these GPU indexes, e.g. 0,1,4-7")
    p.add_argument("--record", metavar="FILE",
                   help="write every snapshot to FILE (docs/recording.md); headless when stdout "
                        "is not a terminal or with --headless")
    p.add_argument("--headless", action="store_true", help="with --record: no dashboard")
    p.add_argument("--record-max-size", type=_size, default=None, metavar="SIZE",
                   help="with --record: before FILE would pass SIZE (e.g. 500M, 2G), finish it "
                        "and go on in FILE.1, FILE.2, ...")
    p.add_argument("--record-keep", type=int, default=None, metavar="K",
                   help="with --record-max-size: keep only the newest K files, deleting older ones")
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help="stop after N snapshots (headless recording)")
    p.add_argument("--demo", action="store_true",
                   help="play the bundled recording of an 8-GPU training node (no GPU needed)")
    p.add_argument("--readonly", action="store_true", help="never offer to kill a process")
    p.add_argument("--no-mouse", action="store_true", help="do not capture the mouse")
    p.add_argument("--ansi", action="store_true", help="use the terminal's 16 ANSI colours")
    return p


def _positive(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return v


def _size(s: str) -> int:
    """Bytes from 500M, 2G, 1.5G, 64k or 1000000 (k, M, G, T are powers of 1024)."""
    text = s.strip().lower().removesuffix("b").removesuffix("i")
    unit = 1
    if text and text[-1] in "kmgt":
        unit = 1 << (10 * ("kmgt".index(text[-1]) + 1))
        text = text[:-1]
    try:
        v = int(float(text) * unit)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a size: {s!r} (e.g. 500M or 2G)") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return v


def _device_list(s: str) -> set[int]:
    out: set[int] = set()
    try:
        for part in s.split(","):
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indexes: {s!r}") from None
    return out


# ----------------------------------------------------------------------------------------------
# feeds


def live_poller(args: argparse.Namespace, *, slow_interval: float = 5.0) -> Any:
    """A Poller over every GPU backend this machine may have, and the host."""
    from gputop.poller import Poller
    from gputop.sources.host import HostSource
    from gputop.sources.nvml import NvmlSource

    sources: list[Any] = [NvmlSource(slow_interval=slow_interval)]
    try:
        from gputop.sources.amd import AmdSource
    except ImportError:
        pass
    else:
        sources.append(AmdSource(slow_interval=slow_interval))
    poller = Poller(sources, HostSource(), devices=args.devices)
    poller.open()
    return poller


def demo_feed(args: argparse.Namespace) -> Any:
    from gputop.replay import RecordingFeed, demo_path

    return RecordingFeed.from_file(demo_path())


def _call_with_timeout(fn: Callable[[], Snapshot], timeout: float) -> Snapshot:
    """NVML calls can hang on a sick GPU; a one-shot must still end."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["snap"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True, name="gputop-poll")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise GputopError(f"the GPU driver did not answer within {timeout:.0f} s",
                          hint="a GPU may be hung; check `dmesg` for Xid errors")
    if "error" in box:
        raise box["error"]
    return box["snap"]


# ----------------------------------------------------------------------------------------------
# modes


def run_once(args: argparse.Namespace, out: TextIO) -> int:
    from gputop.show.table import render

    if args.demo:
        feed = demo_feed(args)
        feed.skip(120)  # two minutes in: training is running
        snap = feed.poll_once()
    else:
        # Short slow cadence so that rates and GPM (which need two readings) are filled.
        poller = live_poller(args, slow_interval=0.2)
        try:
            _call_with_timeout(poller.poll_once, ONCE_TIMEOUT_S)
            time.sleep(0.25)
            snap = _call_with_timeout(poller.poll_once, ONCE_TIMEOUT_S)
        finally:
            poller.close()
    if args.json:
        json.dump(snap.to_dict(), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render(snap))
    return 0


def open_recording(args: argparse.Namespace, meta: dict[str, Any]) -> Any:
    """The RecordingWriter of --record, --record-max-size and --record-keep."""
    from gputop.recording import RecordingWriter

    return RecordingWriter(args.record, meta=meta, max_bytes=args.record_max_size,
                           keep=args.record_keep)


def run_record_headless(args: argparse.Namespace, err: TextIO) -> int:
    feed = demo_feed(args) if args.demo else live_poller(args)
    meta = {"interval": args.interval, "argv": sys.argv[1:], "host": socket.gethostname()}
    try:
        writer = open_recording(args, meta)
    except RecordingError:
        feed.close()
        raise
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    err.write(f"gputop: recording to {args.record} every {args.interval:g} s "
              "(Ctrl-C to stop)\n")
    failed: RecordingError | None = None
    try:
        next_at = time.monotonic()
        while not stop.is_set() and (args.count is None or writer.ticks < args.count):
            snap = _call_with_timeout(feed.poll_once, ONCE_TIMEOUT_S)
            writer.write(snap)
            next_at += args.interval
            stop.wait(max(0.0, next_at - time.monotonic()))
    except KeyboardInterrupt:
        pass
    except RecordingError as e:  # a full disk: the file keeps every tick before it
        failed = e
    finally:
        feed.close()
        failed = _close_recording(writer, failed)
    if failed is not None:
        raise failed  # main prints it as the one line
    files = writer.segments
    where = (str(files[0]) if len(files) == 1
             else f"{len(files)} files, {files[0]} to {files[-1].name}")
    err.write(f"gputop: {writer.ticks} snapshots, {writer.bytes_written} bytes in {where}\n")
    return 0


def run_dashboard(args: argparse.Namespace) -> int:
    from gputop.ui.app import GputopApp

    feed = demo_feed(args) if args.demo else live_poller(args)
    writer = None
    if args.record:
        writer = open_recording(args, {"interval": args.interval})
        feed = RecordingTee(feed, writer)
    tee = feed
    feed = with_diagnostics(feed)
    failed: RecordingError | None = None
    try:
        app = GputopApp(feed, interval=args.interval, readonly=args.readonly,
                        mouse=not args.no_mouse, ansi=args.ansi,
                        title_suffix=" (demo recording)" if args.demo else "")
        feed.listener = app.set_findings
        app.run(mouse=not args.no_mouse)
    finally:
        feed.close()
        if writer is not None:
            failed = _close_recording(writer, getattr(tee, "failed", None))
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


class DiagnosedFeed:
    """A feed that runs the diagnostics engine over every snapshot (in a worker thread: a few ms
    a tick) and hands the open Findings to `listener` (the dashboard's findings panel)."""

    def __init__(self, feed: Any, engine: Any) -> None:
        self.feed = feed
        self.engine = engine
        self.listener: Callable[[list[Any]], None] | None = None

    def poll_once(self) -> Snapshot:
        snap = self.feed.poll_once()
        self._tell(self.engine.update(snap))
        return snap

    async def stream(self, interval: float) -> Any:
        import asyncio

        async for snap in self.feed.stream(interval):
            self._tell(await asyncio.to_thread(self.engine.update, snap))
            yield snap

    def _tell(self, findings: list[Any]) -> None:
        if self.listener is not None:
            self.listener(findings)

    def close(self) -> None:
        self.feed.close()


def with_diagnostics(feed: Any) -> DiagnosedFeed:
    from gputop.diagnose import default_engine

    return DiagnosedFeed(feed, default_engine())


class RecordingTee:
    """A feed that also writes what it yields. A write failure (a full disk) is reported in the
    snapshot's warnings and recording stops; monitoring goes on and the file keeps every tick
    written before."""

    def __init__(self, feed: Any, writer: Any) -> None:
        self.feed = feed
        self.writer = writer
        self.error: str | None = None
        self.failed: RecordingError | None = None  # why recording stopped

    def _tee(self, snap: Snapshot) -> Snapshot:
        if self.error is None:
            try:
                self.writer.write(snap)
            except RecordingError as e:
                self.failed = e
                self.error = f"recording stopped: {e}"
        if self.error is not None:
            snap = dataclasses.replace(snap, warnings=(*snap.warnings, self.error))
        return snap

    def poll_once(self) -> Snapshot:
        return self._tee(self.feed.poll_once())

    async def stream(self, interval: float) -> Any:
        async for snap in self.feed.stream(interval):
            yield self._tee(snap)

    def close(self) -> None:
        self.feed.close()


# ----------------------------------------------------------------------------------------------


def replay_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="gputop replay",
                                description="Play a recording in the dashboard; of a recording "
                                            "in segments, all its files as one run.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="the recording (its first file), or its files (run.gputop*)")
    p.add_argument("--interval", type=_positive, default=1.0, metavar="SECONDS",
                   help="seconds a tick lasts on screen at 1x (default 1); + and - change the "
                        "speed while playing")
    p.add_argument("--once", action="store_true", help="print the last snapshot and exit")
    p.add_argument("--json", action="store_true", help="with --once: as JSON")
    p.add_argument("--follow", action="store_true",
                   help="the recording is still being written: start at its newest tick and "
                        "show new ticks as they are appended")
    p.add_argument("--paused", action="store_true", help="start paused (space plays)")
    p.add_argument("--no-mouse", action="store_true")
    p.add_argument("--ansi", action="store_true")
    args = p.parse_args(argv)
    from gputop.series_index import SeriesIndex
    from gputop.show.table import render

    index = SeriesIndex(args.files[0] if len(args.files) == 1 else args.files,
                        follow=args.follow)
    if index.ticks == 0 and not args.follow:
        index.close()
        raise RecordingError(f"{index.path}: the recording holds no snapshots",
                             hint=index.warning or "")
    if args.once or args.json or not sys.stdout.isatty():
        try:
            if index.ticks == 0:
                raise RecordingError(f"{index.path}: the recording holds no snapshots yet")
            snap, warning = last_readable(index)
        finally:
            index.close()
        if warning:
            print(f"gputop: warning: {warning}", file=sys.stderr)
        if args.json:
            json.dump(snap.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render(snap))
        return 0
    from gputop.replay_control import ReplayFeed
    from gputop.ui.app import GputopApp

    feed = ReplayFeed(index, follow=args.follow, paused=args.paused)
    name = index.path.name
    name = name if len(name) <= 24 else name[:23] + "…"
    try:
        app = GputopApp(feed, interval=args.interval, readonly=True, mouse=not args.no_mouse,
                        ansi=args.ansi, title_suffix=f"  {name}", replay=feed)
        app.run(mouse=not args.no_mouse)
    finally:
        feed.close()
        index.close()
    if index.warning:
        print(f"gputop: warning: {index.warning}", file=sys.stderr)
    return 0


def last_readable(index: Any) -> tuple[Snapshot, str | None]:
    """The last tick of a recording that can be read, and what was said of the rest: a tick
    the index took (it reads only their times) may turn out damaged when decoded, and the
    recording is then read up to it, as every reader reads it."""
    from gputop.recording_index import TickDamaged

    warnings = [index.warning] if index.warning else []
    reader = index.reader()
    tick = index.ticks - 1
    try:
        while True:
            try:
                return reader.snapshot(tick), "; ".join(warnings) or None
            except TickDamaged as e:
                if e.tick == 0:
                    raise RecordingError(f"{index.path}: no tick of the recording can be read",
                                         hint=e.message) from None
                warnings.append(f"{e.message}; read up to it")
                tick = min(tick, e.tick) - 1
    finally:
        reader.close()


def import_main(argv: Sequence[str]) -> int:
    from gputop.importers.formats import FORMATS, accepted, import_logs, parse_start
    from gputop.safetext import printable

    p = argparse.ArgumentParser(
        prog="gputop import",
        description=f"Turn GPU logs into a recording. Reads {accepted()} outputs; the kind of "
                    "each file is told from its content.")
    p.add_argument("files", nargs="+", help="the logs, in time order")
    p.add_argument("-o", "--output", required=True, help="the recording to write")
    p.add_argument("--format", choices=["auto", *FORMATS], default="auto",
                   help="read every file as this kind (default: tell from the content)")
    p.add_argument("--interval", type=_positive, default=1.0, metavar="SECONDS",
                   help="seconds between moments of a log without times (nvidia-smi -l, dmon "
                        "-d, rocm-smi in a loop; default 1)")
    p.add_argument("--start", default="0", metavar="TIME",
                   help="when a log without times began: 2024-05-01T12:00:00 (UTC) or epoch "
                        "seconds")
    p.add_argument("--query-gpu", metavar="FIELDS",
                   help="the --query-gpu list of a CSV log written with `noheader`")
    p.add_argument("--topo", help="an `nvidia-smi topo -m` output to attach")
    args = p.parse_args(argv)
    from gputop.importers.nvsmi_topo import parse_topo_matrix
    from gputop.recording import RecordingWriter

    topo = None
    if args.topo:
        try:
            topo = parse_topo_matrix(_read_text(args.topo))
        except ValueError as e:
            raise GputopError(f"{args.topo}: {e}") from None
    result = import_logs(
        [(path, _read_text(path)) for path in args.files], fmt=args.format,
        start=parse_start(args.start), interval=args.interval, topology=topo,
        query_gpu=args.query_gpu.split(",") if args.query_gpu else None)
    for warning in result.warnings[:10]:  # the rest are in the recording, tick by tick
        print(f"gputop: warning: {printable(warning)}", file=sys.stderr)
    if len(result.warnings) > 10:
        print(f"gputop: warning: and {len(result.warnings) - 10} more", file=sys.stderr)
    with RecordingWriter(args.output, meta={"imported_from": result.format}) as w:
        for snap in result.snapshots:
            w.write(snap)
    print(f"gputop: {len(result.snapshots)} snapshots ({result.format}) written to "
          f"{args.output}", file=sys.stderr)
    return 0


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise GputopError(f"cannot read {path}: {e.strerror or e}") from None


def _subcommand(name: str) -> Callable[[Sequence[str]], int] | None:
    if name == "replay":
        return replay_main
    if name == "import":
        return import_main
    if name == "report":
        from gputop.diagnose.report import main as report_main

        return report_main
    if name == "plan":
        from gputop.plan import main as plan_main

        return plan_main
    if name == "serve":
        from gputop.export.serve import main as serve_main

        return serve_main
    if name == "fleet":
        from gputop.fleet.command import main as fleet_main

        return fleet_main
    if name == "export":
        from gputop.export_table import main as export_main

        return export_main
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and not argv[0].startswith("-"):
            command = _subcommand(argv[0])
            if command is None:
                print(f"gputop: unknown command {argv[0]!r} (commands: replay, report, import, "
                      "plan, serve, fleet, export; see gputop --help)", file=sys.stderr)
                return 2
            return command(argv[1:])
        return _main(argv)
    except GputopError as e:
        print(f"gputop: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `gputop --once | head`: the reader left; not an error worth a message.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if os.environ.get("GPUTOP_DEBUG"):
            raise
        print(f"gputop: internal error: {type(e).__name__}: {e} "
              "(set GPUTOP_DEBUG=1 to see where)", file=sys.stderr)
        return 70


def _main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.json and not args.once and sys.stdout.isatty():
        parser.error("--json needs --once (or a pipe)")
    if args.record_max_size is not None and not args.record:
        parser.error("--record-max-size needs --record")
    if args.record_keep is not None and (args.record_max_size is None or args.record_keep < 1):
        parser.error("--record-keep needs --record-max-size and a count of at least 1")
    tty = sys.stdout.isatty() and sys.stdin.isatty()
    if args.record and (args.headless or not tty):
        return run_record_headless(args, sys.stderr)
    if args.once or args.json or not tty:
        return run_once(args, sys.stdout)
    return run_dashboard(args)
