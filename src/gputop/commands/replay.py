"""`gputop replay FILE`: play a recording in the dashboard, with keys to pause, step, change the
speed and seek; of a recording in segments, all its files as one run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from gputop.commands.args import positive
from gputop.errors import RecordingError
from gputop.recording.series_index import SeriesIndex, last_readable
from gputop.replay.control import ReplayFeed
from gputop.safetext import encodable_tree
from gputop.ui.view.table import render


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="gputop replay",
                                description="Play a recording in the dashboard; of a recording "
                                            "in segments, all its files as one run.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="the recording (its first file), or its files (run.gputop*)")
    p.add_argument("--interval", type=positive, default=1.0, metavar="SECONDS",
                   help="seconds a tick lasts on screen at 1x (default 1); + and - change the "
                        "speed while playing")
    p.add_argument("--once", action="store_true", help="print the last snapshot and exit")
    p.add_argument("--json", action="store_true", help="with --once: as JSON")
    p.add_argument("--follow", action="store_true",
                   help="the recording is still being written: start at its newest tick and "
                        "show new ticks as they are appended")
    p.add_argument("--paused", action="store_true", help="start paused (space plays)")
    p.add_argument("--no-mouse", action="store_true", help="do not capture the mouse")
    p.add_argument("--ansi", action="store_true", help="use the terminal's 16 ANSI colours")
    args = p.parse_args(argv)
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
            json.dump(encodable_tree(snap.to_dict()), sys.stdout, indent=2, ensure_ascii=False)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render(snap))
        return 0
    from gputop.ui.app import GputopApp  # Textual only for the dashboard

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
