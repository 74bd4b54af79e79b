"""How much CPU and terminal bandwidth the live dashboard costs.

Runs `GputopApp` on a replayed recording (8 GPUs by default: the bundled demo) inside a real
terminal (tmux), lets it warm up, then measures for `--seconds`:

* CPU: the app process's user + system time over wall time, as % of one core;
* bytes written to the terminal per tick (tmux pipe-pane sees exactly what the app writes).

    python bench/ui_bench.py                        # 120x40, 1 s ticks, 30 s
    python bench/ui_bench.py --size 80x24 --seconds 60
    python bench/ui_bench.py --recording my-run.jsonl.gz
    python bench/ui_bench.py --diagnose             # with the diagnostics, as `gputop` runs
    python bench/ui_bench.py --floor                # Textual alone: one line changed a tick

`--floor` runs a Textual app that shows one line and changes it every tick, in the same
terminal: what any Textual dashboard costs before it draws anything of its own.

Without tmux (`--headless`) only CPU is measured, with Textual's headless driver.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def default_recording() -> Path:
    from gputop.feeds.playback import demo_path

    return demo_path()


def floor_app(interval: float) -> Any:
    """A Textual app that shows one line and changes it every `interval` seconds."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    class Floor(App[None]):
        BINDINGS = [("q", "quit", "Quit")]

        def compose(self) -> ComposeResult:
            yield Static("", id="line")

        def on_mount(self) -> None:
            self.animation_level = "none"
            self.set_interval(interval, self.tick)

        def tick(self) -> None:
            self.query_one("#line", Static).update(f"tick at {time.time():.3f}")

    return Floor()


def child(args: argparse.Namespace) -> None:
    """The app under test, fed by the recording at `args.interval`."""
    from gputop.feeds.playback import RecordingFeed
    from gputop.recording import read_recording
    from gputop.ui.app import GputopApp

    if args.floor:
        app = floor_app(args.interval)
        app.run(headless=args.headless, size=args.size if args.headless else None,
                mouse=False)
        return
    # Decoded before the run: the UI's cost is measured, not the recording's decoding (a live
    # run polls NVML in a thread instead).
    feed: Any = RecordingFeed(read_recording(args.recording).snapshots)
    feed.skip(args.skip)
    if args.diagnose:
        from gputop.feeds.diagnosed import with_diagnostics

        feed = with_diagnostics(feed)
    app = GputopApp(feed, interval=args.interval, mouse=False, title_suffix=" (bench)")
    if args.diagnose:
        feed.listener = app.set_findings
    if args.headless:
        app.run(headless=True, size=args.size, mouse=False)
    else:
        app.run(mouse=False)


def _tmux(sock: str, *cmd: str) -> str:
    out = subprocess.run(["tmux", "-L", sock, *cmd], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _app_process(root_pid: int) -> psutil.Process:
    """The Python process running the app (tmux starts it through a shell)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            root = psutil.Process(root_pid)
            for p in [root, *root.children(recursive=True)]:
                if "--child" in p.cmdline():
                    return p
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.1)
    raise SystemExit("the app did not start")


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def measure_tmux(args: argparse.Namespace) -> dict[str, float]:
    if not shutil.which("tmux"):
        raise SystemExit("tmux is not installed (apt-get install tmux), or use --headless")
    width, height = args.size
    sock = f"gputop-bench-{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tty.out"
        out.touch()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--skip", str(args.skip),
               "--recording", str(args.recording), "--interval", str(args.interval),
               *_modes(args)]
        env = f"COLORTERM={'truecolor' if args.truecolor else ''}"
        _tmux(sock, "new-session", "-d", "-x", str(width), "-y", str(height), "-s", "bench",
              f"env {env} {shlex.join(cmd)}")
        try:
            _tmux(sock, "pipe-pane", "-o", "-t", "bench", f"cat >> {shlex.quote(str(out))}")
            app = _app_process(int(_tmux(sock, "display", "-p", "-t", "bench", "#{pane_pid}")))
            time.sleep(args.warmup)
            cpu0, bytes0, t0 = _cpu(app), out.stat().st_size, time.monotonic()
            time.sleep(args.seconds)
            cpu1, bytes1, t1 = _cpu(app), out.stat().st_size, time.monotonic()
            _tmux(sock, "send-keys", "-t", "bench", "q")
            try:
                app.wait(5)
                clean = True
            except psutil.TimeoutExpired:
                clean = False
        finally:
            subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
    wall = t1 - t0
    ticks = wall / args.interval
    return {"cpu_percent": 100 * (cpu1 - cpu0) / wall, "bytes_per_tick": (bytes1 - bytes0) / ticks,
            "bytes_per_second": (bytes1 - bytes0) / wall, "quit_cleanly": float(clean)}


def measure_headless(args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--headless",
           "--skip", str(args.skip),
           "--recording", str(args.recording), "--interval", str(args.interval),
           "--size", f"{args.size[0]}x{args.size[1]}", *_modes(args)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        app = psutil.Process(proc.pid)
        time.sleep(args.warmup)
        cpu0, t0 = _cpu(app), time.monotonic()
        time.sleep(args.seconds)
        cpu1, t1 = _cpu(app), time.monotonic()
    finally:
        proc.terminate()
        proc.wait(5)
    return {"cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0)}


def _modes(args: argparse.Namespace) -> list[str]:
    return [flag for flag, on in (("--diagnose", args.diagnose), ("--floor", args.floor)) if on]


def _size(text: str) -> tuple[int, int]:
    w, _, h = text.lower().partition("x")
    return int(w), int(h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured time (default 30)")
    ap.add_argument("--warmup", type=float, default=5.0, help="unmeasured start (default 5)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds per tick (default 1)")
    ap.add_argument("--size", type=_size, default=(120, 40), help="terminal WxH (default 120x40)")
    ap.add_argument("--recording", type=Path, default=None,
                    help="recording to replay (default: the bundled 8-GPU demo)")
    ap.add_argument("--skip", type=int, default=30,
                    help="ticks of the recording to skip (default 30: past the demo's warm-up)")
    ap.add_argument("--truecolor", action="store_true", help="advertise 24-bit colour")
    ap.add_argument("--headless", action="store_true", help="no tmux: CPU only")
    ap.add_argument("--diagnose", action="store_true",
                    help="run the diagnostics over every tick, as the live dashboard does")
    ap.add_argument("--floor", action="store_true",
                    help="instead of gputop, a Textual app that changes one line a tick")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.recording = args.recording or default_recording()
    if not args.recording.exists():
        raise SystemExit(f"{args.recording}: no such recording (make one with "
                         "`python tools/make_demo.py OUT` and pass --recording OUT)")
    if args.child:
        child(args)
        return 0
    result = measure_headless(args) if args.headless else measure_tmux(args)
    w, h = args.size
    what = ("Textual floor (one line changed a tick)" if args.floor else
            f"gputop dashboard{' with diagnostics' if args.diagnose else ''}")
    print(f"{what}, {w}x{h}, tick {args.interval:g} s, {args.seconds:g} s measured "
          f"({args.recording.name})")
    print(f"  CPU: {result['cpu_percent']:.2f} % of one core")
    if "bytes_per_tick" in result:
        print(f"  terminal output: {result['bytes_per_tick'] / 1024:.1f} KiB per tick "
              f"({result['bytes_per_second'] / 1024:.1f} KiB/s)")
        print(f"  quit with q: {'yes' if result['quit_cleanly'] else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
