"""`gputop serve`: serve GPU metrics to Prometheus (gputop.export), from this machine's GPUs or
from a recording played in a loop."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from gputop.commands.args import device_list, parse_address, positive
from gputop.diagnose import default_engine
from gputop.export.prometheus import HOSTNAME_LABELS, exposition
from gputop.export.server import (
    DEFAULT_ADDRESS,
    LIVE_INTERVAL,
    RECORDING_INTERVAL,
    Exporter,
    listen,
    url,
)
from gputop.feeds import PolledFeed, one_malloc_arena
from gputop.feeds.live import live_poller
from gputop.feeds.playback import RecordingFeed, demo_path
from gputop.sources.pod_resources import DEFAULT_SOCKET, PodResources


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop serve",
        description="Serve GPU metrics to Prometheus, with dcgm-exporter's metric names "
                    "(docs/metrics.md).")
    p.add_argument("--metrics", type=parse_address, default=DEFAULT_ADDRESS, metavar="ADDR:PORT",
                   help="where to listen (default 127.0.0.1:9400, dcgm-exporter's port; "
                        ":9400 or 0.0.0.0:9400 for every interface; port 0 picks a free one)")
    p.add_argument("--interval", type=positive, default=None, metavar="SECONDS",
                   help=f"seconds between polls (default {LIVE_INTERVAL:g}; "
                        f"{RECORDING_INTERVAL:g} with --demo or --replay)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true",
                        help="serve the bundled recording of an 8-GPU node, looping")
    source.add_argument("--replay", metavar="FILE", help="serve a recording, looping")
    p.add_argument("--hostname", default="", metavar="NAME",
                   help="the host label's value (default: the recorded or this machine's host "
                        "name)")
    p.add_argument("--hostname-label", choices=HOSTNAME_LABELS, default=HOSTNAME_LABELS[0],
                   help="the host label's name: Hostname (default, dcgm-exporter 4.x) or "
                        "hostname (dcgm-exporter's later releases)")
    p.add_argument("--kubernetes", action="store_true",
                   help="add pod, namespace and container labels to each GPU's series, from the "
                        "kubelet's pod-resources socket (needs gputop-ml[k8s])")
    p.add_argument("--pod-resources-socket", default=None, metavar="PATH",
                   help=f"the kubelet's pod-resources socket (default {DEFAULT_SOCKET}); "
                        "implies --kubernetes")
    p.add_argument("--devices", type=device_list, default=None, metavar="LIST",
                   help="only these GPU indexes, e.g. 0,1,4-7")
    p.add_argument("--once", action="store_true",
                   help="print one scrape on stdout and exit (no server)")
    return p


def open_feed(args: argparse.Namespace) -> PolledFeed:
    if args.demo or args.replay:
        feed = RecordingFeed.from_file(args.replay or demo_path(), loop=True, retime=True,
                                       interval=args.interval, devices=args.devices)
        if feed.warning:
            print(f"gputop: warning: {feed.warning}", file=sys.stderr)
        return feed
    return live_poller(args.devices)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    recorded = bool(args.demo or args.replay)
    interval = args.interval or (RECORDING_INTERVAL if recorded else LIVE_INTERVAL)
    pods = None
    if args.kubernetes or args.pod_resources_socket:
        pods = PodResources(args.pod_resources_socket or DEFAULT_SOCKET)
    if not args.once:
        one_malloc_arena()
    feed = open_feed(args)
    exporter = Exporter(feed, interval=interval, hostname=args.hostname,
                        hostname_label=args.hostname_label, engine=default_engine(), pods=pods,
                        err=sys.stderr)
    try:
        if args.once:
            exporter.poll()
            sys.stdout.buffer.write(exposition(exporter.registry().collect()))
            sys.stdout.flush()
            return 0 if exporter.state.ok else 1
        server = listen(args.metrics, exporter.registry())
        threading.Thread(target=server.serve_forever, name="gputop-exporter-http",
                         daemon=True).start()
        try:
            exporter.poll()
            print(f"gputop: serving metrics on {url(server)} every {interval:g} s "
                  "(Ctrl-C to stop)", file=sys.stderr, flush=True)
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, lambda *_: exporter.stop())
            exporter.run()
        finally:
            server.shutdown()
            server.server_close()
    finally:
        exporter.stop()
        feed.close()
        if pods is not None:
            pods.close()
    return 0
