"""examples/grafana/gputop.json against a real Prometheus scraping two nodes part way through
dcgm-exporter's label rename: node-a says `Hostname`, node-b `hostname`. Every panel's query, with
the dashboard's variables as Grafana fills them, shows both nodes, once each."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from gputop.fleet.promql import Prometheus, PrometheusError
from gputop.testing.prometheus_server import PROMETHEUS, prometheus, serve, stop

BOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "gputop.json"
NODES = {"node-a", "node-b"}


def board() -> dict:  # type: ignore[type-arg]
    return json.loads(BOARD.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def panel_queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in board()["panels"] for t in p.get("targets", [])]


def variable(name: str) -> dict:  # type: ignore[type-arg]
    return next(v for v in board()["templating"]["list"] if v["name"] == name)


def query_result_line(labels: dict[str, str], value: float) -> str:
    """A series as Grafana's query_result() writes it for the variable's regex to read."""
    pairs = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{{{pairs}}} {value:g} 1700000000000"


def fill(expr: str) -> str:
    """Grafana's interpolation with every node and every GPU selected (multi-value: a group)."""
    return expr.replace("$node", "(node-a|node-b)").replace("$gpu", variable("gpu")["allValue"])


def test_every_host_selector_asks_for_both_spellings() -> None:
    for title, expr in panel_queries():
        assert "$Hostname" not in expr, title
        assert expr.count('Hostname=~"$node"') == expr.count('hostname=~"$node"') >= 1, title


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed "
                    "(Debian/Ubuntu: apt-get install prometheus)")
def test_a_fleet_with_both_spellings_shows_every_node_once(tmp_path: Path) -> None:
    a, port_a = serve("--demo", "--hostname", "node-a")
    b, port_b = serve("--demo", "--hostname", "node-b", "--hostname-label", "hostname")
    try:
        with prometheus(tmp_path, [port_a, port_b]) as url:
            prom = Prometheus(url, timeout=5)
            deadline = time.monotonic() + 30
            ready = 0.0
            while time.monotonic() < deadline:  # both scraped three times: increase() has data
                try:
                    got = prom.query('min(count_over_time(gputop_up[1m]))')
                    ready = got.samples[0].value if got.samples and \
                        len(prom.query("gputop_up").samples) == 2 else 0.0
                except PrometheusError:
                    ready = 0.0
                if ready >= 3:
                    break
                time.sleep(0.3)
            assert ready >= 3, "Prometheus did not scrape both exporters in 30 s"

            # The variables: the node list reads either label, the GPU list both nodes' GPUs.
            node = variable("node")
            inner = re.fullmatch(r"query_result\((.*)\)", node["query"]["query"]).group(1)
            regex = re.compile(node["regex"].strip("/"))
            listed = {m.group(1) for s in prom.query(inner).samples
                      for m in [regex.search(query_result_line(s.labels, s.value))] if m}
            assert listed == NODES
            gpus = variable("gpu")
            inner = re.fullmatch(r"query_result\((.*)\)", gpus["query"]["query"]).group(1)
            assert {s.labels["gpu"] for s in prom.query(fill(inner)).samples} == \
                {str(i) for i in range(8)}

            shown = 0
            for title, expr in panel_queries():
                samples = prom.query(fill(expr)).samples
                keys = [(s.labels.get("Hostname"), s.labels.get("hostname")) for s in samples]
                assert all(not (h and h2) for h, h2 in keys), title  # never both labels
                nodes = {h or h2 for h, h2 in keys} - {None}
                assert nodes in (NODES, set()), (title, expr, nodes)
                if nodes:
                    shown += 1
                    # once each: as many series for node-b as for node-a
                    per_node = [sum(1 for h, h2 in keys if (h or h2) == n) for n in NODES]
                    assert per_node[0] == per_node[1], (title, per_node)
            utilization = prom.query(fill(next(e for t, e in panel_queries()
                                               if t == "GPU utilization"))).samples
            assert len(utilization) == 16
            # Prometheus scraped OpenMetrics (what it asks for first): DCGM's counters, typed
            # unknown there, arrive under their own names.
            energy = prom.query("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").samples
            assert len(energy) == 16 and all(s.value > 0 for s in energy)
            assert shown >= 20, shown
    finally:
        stop(a)
        stop(b)
