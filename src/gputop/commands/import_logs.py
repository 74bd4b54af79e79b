"""`gputop import -o OUT FILES`: turn nvidia-smi and rocm-smi logs into a recording."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gputop.commands.args import positive
from gputop.errors import GputopError
from gputop.importers.formats import FORMATS, accepted, import_logs, parse_start
from gputop.importers.nvsmi_topo import parse_topo_matrix
from gputop.recording.writer import RecordingWriter
from gputop.report.summary import SummaryKeeper
from gputop.safetext import printable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop import",
        description=f"Turn GPU logs into a recording. Reads {accepted()} outputs; the kind of "
                    "each file is told from its content.")
    p.add_argument("files", nargs="+", help="the logs, in time order")
    p.add_argument("-o", "--output", required=True, help="the recording to write")
    p.add_argument("--format", choices=["auto", *FORMATS], default="auto",
                   help="read every file as this kind (default: tell from the content)")
    p.add_argument("--interval", type=positive, metavar="SECONDS",
                   help="seconds between moments of a log without times (nvidia-smi -l, dmon "
                        "-d, rocm-smi in a loop; default 1)")
    p.add_argument("--start", metavar="TIME",
                   help="when a log without times began: 2024-05-01T12:00:00 (UTC) or epoch "
                        "seconds (default 0)")
    p.add_argument("--query-gpu", metavar="FIELDS",
                   help="the --query-gpu list of a CSV log written with `noheader`")
    p.add_argument("--topo", help="an `nvidia-smi topo -m` output to attach")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    topo = None
    if args.topo:
        try:
            topo = parse_topo_matrix(_read_text(args.topo))
        except ValueError as e:
            raise GputopError(f"{args.topo}: {e}") from None
    result = import_logs(
        [(path, _read_text(path)) for path in args.files], fmt=args.format,
        start=None if args.start is None else parse_start(args.start),
        interval=args.interval, topology=topo,
        query_gpu=args.query_gpu.split(",") if args.query_gpu else None)
    for warning in result.warnings[:10]:  # the rest are in the recording, tick by tick
        print(f"gputop: warning: {printable(warning)}", file=sys.stderr)
    if len(result.warnings) > 10:
        print(f"gputop: warning: and {len(result.warnings) - 10} more", file=sys.stderr)
    with RecordingWriter(args.output, meta={"imported_from": result.format},
                         summarizer=SummaryKeeper()) as w:
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
