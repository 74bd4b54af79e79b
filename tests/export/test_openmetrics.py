"""gputop writes the OpenMetrics text Prometheus asks for itself, byte for byte as
prometheus_client's writer does (which takes ten times as long); where the metrics hold what it
does not write, prometheus_client writes them."""

from __future__ import annotations

import math
import time

import pytest
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Exemplar, Sample

from gputop.export.prometheus import (
    ExportState,
    SnapshotCollector,
    _Collected,
    _OpenMetricsView,
    negotiate,
    openmetrics,
)
from gputop.feeds.playback import demo_feed

ACCEPTS = [
    # Prometheus 2.x, 3.x, and a scraper that names neither version nor escaping
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.2",
    "application/openmetrics-text",
]


def demo_collector() -> SnapshotCollector:
    feed = demo_feed(1.0, None)
    feed.skip(120)
    state = ExportState(snapshot=feed.poll_once(), polled_at=time.time(), ok=True)
    return SnapshotCollector(lambda: state)


def odd_metrics() -> list[Metric]:
    """Label values a process name can bring, and every kind of value."""
    m = Metric("gputop_odd", 'a "quoted" doc\\ with a\nnewline', "gauge")
    shared = {"b": 'say "hi"\\n', "a": "line\nbreak", "z": "ünïcode ✓", "c": ""}
    for v in (0, 0.0, -0.0, 1, 1.0, True, -1.5, 1e-7, 123456789.0, 2**60, 85899345920,
              math.inf, -math.inf, math.nan, 0.1 + 0.2):
        m.samples.append(Sample("gputop_odd", shared, v))
    m.samples.append(Sample("gputop_odd", {}, 3, timestamp=1700000000.5))
    unit = Metric("gputop_wait_seconds", "with a unit", "gauge", unit="seconds")
    unit.samples.append(Sample("gputop_wait_seconds", {"gpu": "0"}, 2.5))
    empty = Metric("gputop_nothing", "no samples", "gauge")
    counter = Metric("gputop_polls", "a counter", "counter")
    counter.samples.append(Sample("gputop_polls_total", {}, 7))
    return [m, unit, empty, counter]


@pytest.mark.parametrize("accept", ACCEPTS)
def test_openmetrics_is_prometheus_clients_byte_for_byte(accept: str) -> None:
    encoder, content_type = choose_encoder(accept)
    assert content_type.startswith("application/openmetrics-text")
    reg = CollectorRegistry(auto_describe=False)
    reg.register(demo_collector())
    for metrics in (list(_OpenMetricsView(reg).collect()), odd_metrics()):
        theirs = encoder(_Collected(metrics))
        assert openmetrics(metrics) == theirs
        assert len(theirs) > 100
    body, headers = negotiate(reg, accept, None)
    assert body == encoder(_OpenMetricsView(reg))
    assert ("Content-Type", content_type) in headers


@pytest.mark.parametrize("odd", ["name", "label", "exemplar"])
def test_what_it_does_not_write_prometheus_client_writes(odd: str) -> None:
    name = "gputop:odd.name" if odd == "name" else "gputop_odd_total"
    m = Metric(name.removesuffix("_total"), "doc", "counter")
    labels = {"gpu.index": "0"} if odd == "label" else {"gpu": "0"}
    exemplar = Exemplar({"trace": "x"}, 1.0) if odd == "exemplar" else None
    m.samples.append(Sample(name, labels, 1.0, exemplar=exemplar))
    assert openmetrics([m]) is None
    encoder, _ = choose_encoder(ACCEPTS[0])
    body, _ = negotiate(_Collected([m]), ACCEPTS[0], None)
    assert body == encoder(_OpenMetricsView(_Collected([m])))
