"""`gputop export FILE -o OUT.csv|OUT.parquet`: a recording as a table (gputop.report.table)."""

from __future__ import annotations

import argparse
import sys

from gputop.report.table import export
from gputop.safetext import printable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop export",
        description="Export a recording as a table: one row per (time, GPU), or per (time, "
                    "process) with --processes.")
    p.add_argument("file", metavar="FILE",
                   help="a recording written by gputop --record (with its later segments)")
    p.add_argument("-o", "--output", metavar="OUT", required=True,
                   help="OUT.csv, or OUT.parquet (needs pyarrow)")
    p.add_argument("--processes", action="store_true",
                   help="one row per process on a GPU at each tick instead of one per GPU")
    return p


def main(argv: list[str]) -> int:
    """`argv` is what follows `gputop export` on the command line."""
    args = build_parser().parse_args(argv)
    n, warning = export(args.file, args.output, processes=args.processes)
    if warning:
        print(f"gputop: warning: {warning}", file=sys.stderr)
    print(f"wrote {printable(args.output)}: {n} rows")
    return 0
