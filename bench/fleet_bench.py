"""What a refresh of `gputop fleet` costs for a large fleet.

A fake Prometheus HTTP API on loopback (gputop.testing.fake_prometheus) answers for `--nodes`
nodes x `--gpus` GPUs, with every GPU's values changing between refreshes (the worst case for
the table: every row changes). Measured:

* query + model: wall and CPU time of `Fleet.refresh()` (two HTTP queries, JSON decoding,
  building the nodes), median and max over `--refreshes`; and the size of the answers;
* UI update: `FleetApp.apply_view` (table cells updated where their text changed) and the CPU
  time per refresh including the repaint, in a headless 120x40 app.

    python bench/fleet_bench.py                      # 100 nodes x 8 GPUs, 20 refreshes
    python bench/fleet_bench.py --nodes 500 --refreshes 10

The fake server runs in its own process, as Prometheus would; its JSON encoding (slower than
Prometheus') is in the wall time, not in gputop's CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any


def fleet_answers(nodes: int, gpus: int) -> Any:
    from gputop.testing.fake_prometheus import FakeGpu, FakeNode, FleetAnswers

    return FleetAnswers([
        FakeNode(f"gpu-node-{i:03d}", f"10.0.{i // 250}.{i % 250}:9400", job="gpu",
                 gpus=[FakeGpu() for _ in range(gpus)],
                 findings=[{"id": "loader.starvation", "severity": "warning", "gpu": "",
                            "pid": "1"}] if i % 10 == 0 else [])
        for i in range(nodes)])


class Jittering:
    """The fleet's answers, every GPU's values new at each values query (5 s later)."""

    def __init__(self, nodes: int, gpus: int) -> None:
        self.answers = fleet_answers(nodes, gpus)
        self.rng = random.Random(1)

    def __call__(self, path: str, params: Any) -> Any:
        from gputop.fleet.model import VALUES_QUERY

        if params.get("query") == VALUES_QUERY:
            self.answers.time += 5
            for n in self.answers.nodes:
                for g in n.gpus:
                    g.util = self.rng.randint(0, 100)
                    g.temp = self.rng.randint(40, 85)
                    g.power = self.rng.randint(100, 700)
                    g.fb_used = self.rng.randint(0, 80000)
        return self.answers(path, params)


def serve(nodes: int, gpus: int, urls: Any, done: Any) -> None:
    """The fake Prometheus, in its own process as a real one would be."""
    from gputop.testing.fake_prometheus import FakePrometheus

    with FakePrometheus(Jittering(nodes, gpus)) as prom:
        urls.put(prom.url)
        done.wait()


def measure_refresh(args: argparse.Namespace) -> list[Any]:
    import json
    import multiprocessing
    import urllib.parse
    import urllib.request

    from gputop.fleet.model import STAMPS_QUERY, VALUES_QUERY, Fleet
    from gputop.fleet.promql import Prometheus

    urls: Any = multiprocessing.Queue()
    done = multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(args.nodes, args.gpus, urls, done))
    server.start()
    try:
        url = urls.get(timeout=30)
        fleet = Fleet(Prometheus(url, timeout=30))
        started = time.perf_counter()
        views = [fleet.open()]
        opened = time.perf_counter() - started
        wall, cpu = [], []
        for _ in range(args.refreshes):
            cpu0, started = time.process_time(), time.perf_counter()
            views.append(fleet.refresh())
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu0)
        sizes = {}
        for name, q in (("values", VALUES_QUERY), ("timestamps", STAMPS_QUERY)):
            with urllib.request.urlopen(f"{url}/api/v1/query?"
                                        f"{urllib.parse.urlencode({'query': q})}") as r:
                body = r.read()
            sizes[name] = (len(body), len(json.loads(body)["data"]["result"]))
    finally:
        done.set()
        server.join(10)
    view = views[-1]
    assert not view.error, view.error
    assert len(view.nodes) == args.nodes and view.gpu_count == args.nodes * args.gpus
    print(f"fleet: {args.nodes} nodes x {args.gpus} GPUs ({view.gpu_count} GPUs), "
          f"{len(view.findings)} open findings")
    for name, (size, series) in sizes.items():
        print(f"  answer to the {name} query: {series} series, {size / 1e6:.2f} MB of JSON")
    print(f"  open (checks, targets, last 10 min, first refresh): {opened * 1000:.0f} ms")
    print(f"  refresh (2 queries + model), wall: median {statistics.median(wall) * 1000:.0f} ms, "
          f"max {max(wall) * 1000:.0f} ms over {len(wall)} (includes the fake server's "
          "JSON encoding)")
    print(f"  refresh, gputop's own CPU: median {statistics.median(cpu) * 1000:.0f} ms "
          "(HTTP, JSON decoding, model)")
    return views


async def measure_ui(args: argparse.Namespace, views: list[Any]) -> None:
    from gputop.ui.fleet import FleetApp

    app = FleetApp(None, view=views[0], url="http://prometheus:9090", interval=5)
    applies, cpu = [], []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for view in views[1:]:
            cpu0 = time.process_time()
            started = time.perf_counter()
            app.apply_view(view)
            applies.append(time.perf_counter() - started)
            await pilot.pause()  # lets the table repaint
            cpu.append(time.process_time() - cpu0)
    print(f"  UI: apply_view median {statistics.median(applies) * 1000:.0f} ms, "
          f"max {max(applies) * 1000:.0f} ms; CPU per refresh with the repaint "
          f"median {statistics.median(cpu) * 1000:.0f} ms (120x40, every row changed)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--refreshes", type=int, default=20)
    args = p.parse_args()
    views = measure_refresh(args)
    asyncio.run(measure_ui(args, views))


if __name__ == "__main__":
    main()
