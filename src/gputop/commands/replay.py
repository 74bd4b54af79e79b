"""`gputop replay FILE`: play a recording in the dashboard, with keys to pause, step, change the
speed and seek; of a recording in segments, all its files as one run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from gputop.commands import config
from gputop.commands.args import add_display_args, positive, web_address
from gputop.commands.web import in_browser, serve
from gputop.errors import RecordingError
from gputop.recording.series_index import SeriesIndex, last_readable
from gputop.replay.control import ReplayFeed
from gputop.safetext import encodable_tree
from gputop.ui.view.status import use_thresholds
from gputop.ui.view.table import render


def build_parser() -> argparse.ArgumentParser:
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
    add_display_args(p, "the replay")
    return p


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    config.apply(parser, settings := config.load(), config.DISPLAY_KEYS)
    args = parser.parse_args(argv)
    if args.web is not None and not in_browser():
        return serve(["replay", *argv], web_address(parser, args.web), "gputop replay",
                     sys.stderr)
    use_thresholds(settings.thresholds)
    index = SeriesIndex(args.files[0] if len(args.files) == 1 else args.files,
                        follow=args.follow)
    if index.ticks == 0 and not args.follow:
        index.close()
        raise RecordingError(f"{index.path}: the recording holds no snapshots",
                             hint=index.warning or "")
    if args.once or args.json or not (sys.stdout.isatty() or in_browser()):
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
                        ansi=args.ansi, theme=args.theme, title_suffix=f"  {name}",
                        replay=feed)
        app.run(mouse=not args.no_mouse)
    finally:
        feed.close()
        index.close()
    if index.warning:
        print(f"gputop: warning: {index.warning}", file=sys.stderr)
    return 0
