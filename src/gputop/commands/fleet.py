"""`gputop fleet --prometheus URL`: the fleet dashboard, or one table of it (`--once`, `--json`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from gputop.commands import config
from gputop.commands.args import add_display_args, positive, web_address
from gputop.commands.web import in_browser, serve
from gputop.fleet.model import Fleet, FleetView, Node
from gputop.fleet.promql import DEFAULT_TIMEOUT, Prometheus
from gputop.safetext import printable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop fleet",
        description="Many nodes' GPUs, read from Prometheus (dcgm-exporter or `gputop serve "
                    "--metrics` on each node). Enter on a node shows its GPUs.")
    p.add_argument("--prometheus", required=True, metavar="URL",
                   help="the Prometheus server, e.g. http://prometheus:9090 (a user:password@ "
                        "in it is sent as basic authentication)")
    p.add_argument("--interval", type=positive, default=5.0, metavar="SECONDS",
                   help="seconds between refreshes (default 5)")
    p.add_argument("--scrape-interval", type=positive, default=None, metavar="SECONDS",
                   help="the nodes' scrape interval (default: what Prometheus' targets say, "
                        "else 15); a node with no sample for two of them is flagged")
    p.add_argument("--timeout", type=positive, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"seconds to wait for each answer (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--once", action="store_true", help="print the fleet as a table and exit")
    p.add_argument("--json", action="store_true", help="print the fleet as JSON and exit")
    add_display_args(p, "the fleet dashboard")
    return p


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    config.apply(parser, config.load(), config.DISPLAY_KEYS)
    args = parser.parse_args(argv)
    if args.web is not None and not in_browser():
        return serve(["fleet", *argv], web_address(parser, args.web), "gputop fleet",
                     sys.stderr)
    fleet = Fleet(Prometheus(args.prometheus, timeout=args.timeout),
                  scrape_interval=args.scrape_interval)
    view = fleet.open()  # a bad URL or a server that is not Prometheus ends here, in one line
    if args.once or args.json or not ((sys.stdout.isatty() and sys.stdin.isatty())
                                      or in_browser()):
        if args.json:
            json.dump(view_to_dict(view, fleet.url), sys.stdout, indent=2, ensure_ascii=False)
            sys.stdout.write("\n")
        else:
            write_table(view, fleet.url, sys.stdout)
        return 0
    from gputop.ui.fleet import FleetApp

    FleetApp(fleet, view=view, interval=args.interval, mouse=not args.no_mouse,
             ansi=args.ansi, theme=args.theme).run()
    return 0


def view_to_dict(view: FleetView, url: str) -> dict[str, Any]:
    return {"prometheus": url, "time": view.time, "error": view.error or None,
            "nodes": [dict(dataclasses.asdict(n), name=n.name, reporting=n.reporting)
                      for n in view.nodes],
            "findings": [dataclasses.asdict(f) for f in view.findings]}


def _cell(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def _row(n: Node, now: float | None) -> list[str]:
    gib = 1 << 30
    age = "-" if n.last_seen is None or now is None else f"{now - n.last_seen:.0f}s"
    if not n.reporting:
        return [printable(n.name), n.state.upper(), str(len(n.gpus)), "-", "-", "-", "-",
                str(len(n.findings)), age]
    mem = ("-" if n.mem_used is None
           else f"{n.mem_used / gib:.0f}/{_cell(n.mem_total and n.mem_total / gib, '.0f')}G")
    return [printable(n.name), n.state, str(len(n.gpus)),
            f"{_cell(n.util_mean, '.0f', '%')}/{_cell(n.util_max, '.0f', '%')}", mem,
            _cell(n.temp_max, ".0f", "C"), _cell(n.power, ".0f", "W"), str(len(n.findings)),
            age]


def write_table(view: FleetView, url: str, out: TextIO) -> None:
    when = "-" if view.time is None else time.strftime("%H:%M:%S", time.localtime(view.time))
    out.write(f"{printable(url)}  {len(view.nodes)} nodes, {view.gpu_count} GPUs, "
              f"{len(view.not_reporting)} not reporting, data of {when}\n")
    rows = [["NODE", "STATE", "GPUS", "UTIL avg/max", "MEMORY", "TEMP", "POWER", "FINDINGS",
             "AGE"]] + [_row(n, view.time) for n in view.nodes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")
    for n in view.not_reporting:
        out.write(f"{printable(n.name)}: {n.state}: {printable(n.why)}\n")
    for f in view.findings:
        out.write(f"{f.severity.upper()}: {printable(f.title)}\n")
