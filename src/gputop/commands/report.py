"""`gputop report FILE`: what went wrong during a recorded run, and a summary per GPU.

Runs every diagnostic over the recording and prints the findings' timeline (when the condition
began, when the finding was shown, when it ended, severity, GPU, id, title) and, per GPU,
utilization, memory, power and temperature (p50/p95/max), the time its clocks were held per
clock-event reason (from the cumulative counters) and the time it was starved for input.
`--json` prints the same as one object; `--html FILE` writes it as one page with charts. Times
are UTC.

A file its writer finished carries a summary of itself (gputop.report.summary): the recap
below and the findings, worked out as it was written. When every file has one made by the same
diagnostics, the report reads those and not the ticks: a day takes a second, not minutes.
Otherwise the recording is read a tick at a time and each tick is dropped once the diagnostics
and the recap have taken what they need, so a day-long recording fits in memory.
"""

from __future__ import annotations

import argparse
import json
import sys

from gputop.errors import GputopError
from gputop.report.summary import diagnose
from gputop.report.text import render
from gputop.safetext import printable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop report",
        description="Diagnose a recording: the findings' timeline and a summary per GPU.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="a recording written by gputop --record (its later segments, FILE.1 "
                        "..., are read too), or the segments to read")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--html", metavar="OUT", help="write the report as one HTML page with charts "
                                                 "(no network needed to view it)")
    return p


def main(argv: list[str]) -> int:
    """`argv` is what follows `gputop report` on the command line."""
    out, err = sys.stdout, sys.stderr
    args = build_parser().parse_args(argv)
    try:
        path = args.files[0]
        files = args.files if len(args.files) > 1 else path
        header, recap, findings, warning = diagnose(files, note=err)
        devices = recap.summary(findings)
        if args.html:
            from gputop.report.html import write_html

            write_html(args.html, path, header, recap, findings, devices, warning=warning)
    except GputopError as e:
        print(f"gputop: {e}", file=err)
        return 1
    if warning:
        print(f"gputop: warning: {warning}", file=err)
    if args.json:
        doc = {"file": path, "ticks": recap.ticks, "start": recap.start, "end": recap.end,
               "warning": warning,
               "findings": [f.to_dict() for f in findings], "devices": devices}
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
    elif args.html:
        out.write(f"wrote {printable(args.html)}: {len(findings)} findings, "
                  f"{len(devices)} GPUs, {recap.ticks} ticks\n")
    else:
        out.write(render(path, header, recap, findings, devices))
    return 0
