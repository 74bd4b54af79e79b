"""The fleet: many nodes' GPUs as one Prometheus server knows them, one `FleetView` a refresh.

GPU data is read by dcgm-exporter's metric names (`DCGM_FI_DEV_*`), which `gputop serve
--metrics` exports too, so a fleet of plain dcgm-exporters works; gputop's own series
(`gputop_finding_open`) add the diagnostics' Findings where a node has them.

A node is one scrape target (`job`, `instance`) and the `Hostname` label its GPUs carry. It is
*reporting* while Prometheus scrapes it (`up` is 1) and its newest sample is at most two scrape
intervals old. Otherwise it is shown, not dropped:

- DOWN: Prometheus cannot scrape it (`up == 0`), or gputop on it cannot read its GPUs
  (`gputop_up == 0`);
- STALE: its series are there but the newest sample is older than two scrape intervals (a
  federated or remote-written store, where no staleness markers end a series);
- GONE: no series and no `up` any more (its target was removed) or no GPU series from a target
  still scraped.

`build_nodes` is a pure function of the answers; `Fleet` asks the server and keeps what it saw.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from gputop.fleet.promql import Answer, Prometheus, PrometheusError, Sample
from gputop.model.reasons import REASON_BITS  # DCGM passes NVML's clocks-event bits on

# dcgm-exporter's names (units: %, MiB, °C, W, MHz, NVML's clocks-event bitmask).
METRICS = {
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_FB_USED": "mem_used",
    "DCGM_FI_DEV_FB_FREE": "mem_free",
    "DCGM_FI_DEV_FB_RESERVED": "mem_reserved",
    "DCGM_FI_DEV_FB_TOTAL": "mem_total",
    "DCGM_FI_DEV_GPU_TEMP": "temp",
    "DCGM_FI_DEV_POWER_USAGE": "power",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle",  # DCGM < 3.3
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "throttle",  # its newer name
}
# Exported per MIG instance on a GPU in MIG mode (labels GPU_I_ID, GPU_I_PROFILE).
MEMORY_FIELDS = frozenset({"mem_used", "mem_free", "mem_reserved", "mem_total"})
FINDING_METRIC = "gputop_finding_open"
POLLING_METRIC = "gputop_up"  # gputop serve: 0 while it cannot read the node's GPUs
UP_METRIC = "up"

# One round trip for every value and every target's health; a second for the samples' times (an
# instant query answers with the evaluation time, `timestamp()` gives the sample's own). The times
# come from every GPU metric the values do, so that a GPU with a value always has a time: a node
# exporting only some of them (dcgm-exporter with its own counter list) is judged as any other.
_NAMES = [*METRICS, FINDING_METRIC, POLLING_METRIC, UP_METRIC]
VALUES_QUERY = '{__name__=~"' + "|".join(_NAMES) + '"}'
# `timestamp()` drops the metric name, so each metric is its own vector, joined with `or` (a
# regex selector would put two series with one label set in one vector: an error).
_GPU_STAMPS = " or ".join(f"timestamp({name})" for name in METRICS)
STAMPS_QUERY = _GPU_STAMPS
LOOKBACK_S = 600
# At start: the GPUs seen in the last 10 minutes and when, so that a node already down is shown.
SEEN_QUERY = f"max_over_time(({_GPU_STAMPS})[{LOOKBACK_S}s:10s])"

# The node's name: dcgm-exporter's `Hostname`, else the first of the others (relabelled
# setups), else the target's `instance`. node_key spells them out (it runs for every sample).
HOSTNAME_LABELS = ("Hostname", "hostname", "node", "kubernetes_node")
DEFAULT_SCRAPE_INTERVAL = 15.0  # when Prometheus does not say (Thanos, Mimir, federation)
STALE_INTERVALS = 2  # a node is flagged when its newest sample is older than this many intervals
FORGET_AFTER_S = 3600.0  # a GONE node leaves the list an hour after its last sample
TARGETS_EVERY_S = 60.0  # how often to re-read scrape intervals when an unknown target appears

# DCGM reports "no value" as huge sentinels (int64 0x7ffffffffffffff0 and up, fp64 2**47 and up).
DCGM_BLANK = float(2**47)
MiB = 1 << 20

# What a Finding's id means (the exporter sends ids, not titles: a title carries numbers that
# change while the Finding lasts). Ids from gputop.diagnose.rules; others are shown as they are.
FINDING_WORDS = {
    "loader.starvation": "the input pipeline is starving the GPU",
    "loader.wait": "the training loop waits on its DataLoader",
    "gpu.lost": "the GPU fell off the bus",
    "ecc.uncorrected": "uncorrectable ECC errors",
    "ecc.remap_failed": "a row remap failed",
    "ecc.remap_pending": "a row remap is pending",
    "pcie.downtrained": "PCIe link downtrained under load",
    "pcie.replays": "PCIe replays rising",
    "nvlink.down": "an NVLink link is down",
    "nvlink.errors": "NVLink errors rising",
    "mem.growth": "memory keeps growing",
    "mem.pressure": "GPU memory nearly full",
    "mem.fragmentation": "allocator memory fragmented",
    "mem.headroom": "memory headroom",
    "gpu.copy_bound": "copy-bound",
    "job.straggler": "a straggler GPU holds the job back",
    "thermal.hw": "hardware thermal slowdown",
    "thermal.sw": "thermal throttling",
    "thermal.near": "close to thermal slowdown",
    "power.brake": "power brake slowdown",
    "hw.slowdown": "hardware slowdown",
    "power.cap": "held at the power cap",
}

UP, DOWN, STALE, GONE = "up", "down", "stale", "gone"
NodeKey = tuple[str, str, str]  # job, instance, hostname ("" when the series have none)
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of a node (its `gpu` label). Units: %, bytes, °C, W, MHz; None where the node
    does not export the metric or DCGM had no value. A GPU in MIG mode is one GPU, its memory
    summed over its `mig_instances`."""

    id: str
    uuid: str = ""
    model: str = ""
    pci_bus_id: str = ""
    util: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None
    temp: float | None = None
    power: float | None = None
    sm_clock: float | None = None
    throttle: tuple[str, ...] | None = None
    last_sample: float | None = None  # epoch seconds of its newest sample
    mig_instances: int = 0


@dataclass(frozen=True, slots=True)
class FleetFinding:
    """A Finding a node's gputop exports as open (`gputop_finding_open`)."""

    node: str  # the node's name
    id: str  # "loader.starvation"
    severity: str  # critical | warning | info
    gpu: str = ""  # "" for the whole node
    pid: str = ""  # "" for no single process

    @property
    def title(self) -> str:
        where = f"{self.node} GPU {self.gpu}" if self.gpu else self.node
        return f"{where}: {FINDING_WORDS.get(self.id) or self.id}"

    @property
    def detail(self) -> str:
        return " · ".join(x for x in (self.id, f"PID {self.pid}" if self.pid else "") if x)


@dataclass(frozen=True, slots=True)
class Node:
    job: str
    instance: str
    hostname: str
    state: str = UP
    why: str = ""  # for a node not reporting: what Prometheus says
    gpus: tuple[Gpu, ...] = ()  # for a node not reporting: as last seen
    findings: tuple[FleetFinding, ...] = ()
    last_seen: float | None = None  # its newest sample, epoch seconds
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL

    @property
    def key(self) -> NodeKey:
        return (self.job, self.instance, self.hostname)

    @property
    def name(self) -> str:
        return self.hostname or self.instance

    @property
    def reporting(self) -> bool:
        return self.state == UP

    def _values(self, attr: str) -> list[float]:
        return [v for g in self.gpus if (v := getattr(g, attr)) is not None]

    @property
    def util_mean(self) -> float | None:
        v = self._values("util")
        return sum(v) / len(v) if v else None

    @property
    def util_max(self) -> float | None:
        return max(self._values("util"), default=None)

    @property
    def mem_used(self) -> float | None:
        v = self._values("mem_used")
        return sum(v) if v else None

    @property
    def mem_total(self) -> float | None:
        v = self._values("mem_total")
        return sum(v) if v else None

    @property
    def temp_max(self) -> float | None:
        return max(self._values("temp"), default=None)

    @property
    def power(self) -> float | None:
        v = self._values("power")
        return sum(v) if v else None


@dataclass(frozen=True, slots=True)
class FleetView:
    """What the fleet screen shows after one refresh."""

    nodes: tuple[Node, ...] = ()
    findings: tuple[FleetFinding, ...] = ()  # every open Finding, most severe first
    time: float | None = None  # Prometheus' time of the data; None before the first answer
    error: str = ""  # the last refresh failed: this is the data of the one before

    @property
    def not_reporting(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if not n.reporting)

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    def node(self, key: NodeKey) -> Node | None:
        for n in self.nodes:
            if n.key == key:
                return n
        return None


# ----------------------------------------------------------------------------------------------
# From answers to nodes (pure)


def node_key(labels: Mapping[str, str]) -> NodeKey:
    get = labels.get
    host = get("Hostname") or get("hostname") or get("node") or get("kubernetes_node") or ""
    return (get("job", ""), get("instance", ""), host)


def gpu_id(labels: Mapping[str, str]) -> str:
    return labels.get("gpu", "") or labels.get("UUID", "") or "?"


def _resolve(name: str, by_instance: Mapping[str, float | None]) -> float | None:
    """One GPU's value from its series: the whole GPU's where there is one; else, on a GPU in MIG
    mode, memory summed over its instances and anything else as the largest of them."""
    if "" in by_instance:
        return by_instance[""]
    values = [v for v in by_instance.values() if v is not None]
    if not values:
        return None
    return sum(values) if name in MEMORY_FIELDS else max(values)


def gauge(v: float) -> float | None:
    """A sample's value, or None for NaN, infinities, negatives and DCGM's blank sentinels."""
    if math.isnan(v) or math.isinf(v) or v < 0 or v >= DCGM_BLANK:
        return None
    return v


def throttle_reasons(mask: float | None) -> tuple[str, ...] | None:
    if mask is None:
        return None
    bits = int(mask)
    return tuple(name for bit, name in REASON_BITS.items() if bits & bit)


def _gpu(gid: str, labels: Mapping[str, str], series: Mapping[str, Mapping[str, float | None]],
         last_sample: float | None) -> Gpu:
    fields = {name: _resolve(name, by_instance) for name, by_instance in series.items()}
    instances = {i for by_instance in series.values() for i in by_instance if i}
    used, free = fields.get("mem_used"), fields.get("mem_free")
    total = fields.get("mem_total")
    if total is None and used is not None and free is not None:
        total = used + free + (fields.get("mem_reserved") or 0.0)
    return Gpu(
        id=gid,
        uuid=labels.get("UUID", ""),
        model=labels.get("modelName", ""),
        pci_bus_id=labels.get("pci_bus_id", ""),
        util=fields.get("util"),
        mem_used=None if used is None else used * MiB,
        mem_total=None if total is None else total * MiB,
        temp=fields.get("temp"),
        power=fields.get("power"),
        sm_clock=fields.get("sm_clock"),
        throttle=throttle_reasons(fields.get("throttle")),
        last_sample=last_sample,
        mig_instances=len(instances),
    )


def _natural(name: str) -> tuple[tuple[int, str | int], ...]:
    """"gpu-node-2" before "gpu-node-10"."""
    return tuple((0, int(p)) if p.isdigit() else (1, p)
                 for p in re.split(r"(\d+)", name) if p)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def build_nodes(values: Answer, stamps: Answer | None, *, now: float,
                known: Mapping[NodeKey, Node] | None = None,
                intervals: Mapping[tuple[str, str], float] | None = None,
                default_interval: float = DEFAULT_SCRAPE_INTERVAL) -> tuple[Node, ...]:
    """The nodes of one refresh: those in `values` (the answer to VALUES_QUERY) and those `known`
    from before that are missing now (flagged DOWN or GONE). `stamps` answers STAMPS_QUERY;
    `intervals` maps (job, instance) to its scrape interval."""
    known = known or {}
    intervals = intervals or {}
    up: dict[tuple[str, str], float] = {}
    polling: dict[NodeKey, float] = {}
    labels_of: dict[tuple[NodeKey, str], Mapping[str, str]] = {}
    # (node, gpu) -> field -> GPU instance ("" for the whole GPU) -> value
    fields: dict[tuple[NodeKey, str], dict[str, dict[str, float | None]]] = {}
    finding_samples: list[Sample] = []
    for s in values.samples:
        name = s.labels.get("__name__", "")
        if name == UP_METRIC:
            up[(s.labels.get("job", ""), s.labels.get("instance", ""))] = s.value
        elif name == POLLING_METRIC:
            polling[node_key(s.labels)] = s.value
        elif name == FINDING_METRIC:
            if s.value > 0:
                finding_samples.append(s)
        elif name in METRICS:
            where = (node_key(s.labels), gpu_id(s.labels))
            labels_of.setdefault(where, s.labels)
            by_instance = fields.setdefault(where, {}).setdefault(METRICS[name], {})
            by_instance[s.labels.get("GPU_I_ID", "")] = gauge(s.value)
    sampled: dict[tuple[NodeKey, str], float] = {}
    for s in stamps.samples if stamps else ():
        where = (node_key(s.labels), gpu_id(s.labels))
        sampled[where] = max(s.value, sampled.get(where, s.value))

    gpus: dict[NodeKey, list[Gpu]] = {}
    for (key, gid), f in fields.items():
        gpu = _gpu(gid, labels_of[(key, gid)], f, sampled.get((key, gid)))
        gpus.setdefault(key, []).append(gpu)

    nodes: dict[NodeKey, Node] = {}
    for key in [*gpus, *(k for k in known if k not in gpus)]:
        job, instance, host = key
        interval = intervals.get((job, instance), default_interval)
        target_up = up.get((job, instance))  # None: no such target (any more)
        before = known.get(key)
        if key in gpus:
            # Judged on this answer alone, so that a refresh in the dashboard and `fleet --once`
            # at the same moment say the same; no time at all (a server that answered the values
            # but not the times) is no evidence of age.
            node_gpus = tuple(sorted(gpus[key], key=lambda g: _natural(g.id)))
            stamps_now = [g.last_sample for g in node_gpus if g.last_sample is not None]
            last_seen = max(stamps_now) if stamps_now else None
        else:
            assert before is not None
            node_gpus, last_seen = before.gpus, before.last_seen
        state, why = UP, ""
        if target_up == 0:
            state, why = DOWN, "Prometheus cannot scrape it (up == 0)"
        elif polling.get(key) == 0:
            state, why = DOWN, "gputop on it cannot read its GPUs (gputop_up == 0)"
        elif key not in gpus:
            state = GONE
            why = ("its target is gone from Prometheus" if target_up is None
                   else "it exports no GPU metrics any more")
        elif last_seen is not None and now - last_seen > STALE_INTERVALS * interval:
            state, why = STALE, f"no new sample for {_age(now - last_seen)}"
        if state == GONE and (last_seen is None or now - last_seen > FORGET_AFTER_S):
            continue
        nodes[key] = Node(job, instance, host, state, why, node_gpus, (), last_seen, interval)

    # A node that came back as another target (a restarted pod has a new address) replaces the
    # row it left behind.
    live_names = {n.hostname for n in nodes.values() if n.reporting and n.hostname}
    for key, n in list(nodes.items()):
        if not n.reporting and n.hostname in live_names:
            del nodes[key]

    found: dict[NodeKey, list[FleetFinding]] = {}
    by_target: dict[tuple[str, str], NodeKey] = {}
    for key in nodes:
        by_target.setdefault((key[0], key[1]), key)
    for s in finding_samples:
        key = node_key(s.labels)
        if key not in nodes:
            key = by_target.get((key[0], key[1]), key)
        if key not in nodes:
            continue
        found.setdefault(key, []).append(FleetFinding(
            node=nodes[key].name, id=s.labels.get("id", ""),
            severity=s.labels.get("severity", "info"), gpu=s.labels.get("gpu", ""),
            pid=s.labels.get("pid", "")))
    for key, fs in found.items():
        nodes[key] = replace(nodes[key], findings=tuple(sorted(fs, key=_finding_order)))
    return tuple(sorted(nodes.values(), key=lambda n: (_natural(n.name), n.key)))


def _finding_order(f: FleetFinding) -> tuple[int, tuple[tuple[int, str | int], ...], str, str]:
    return (_SEVERITY_RANK.get(f.severity, 3), _natural(f.node), f.gpu, f.id)


def fleet_findings(nodes: Iterable[Node]) -> tuple[FleetFinding, ...]:
    return tuple(sorted((f for n in nodes for f in n.findings), key=_finding_order))


def seen_nodes(seen: Answer, *, intervals: Mapping[tuple[str, str], float] | None = None,
               default_interval: float = DEFAULT_SCRAPE_INTERVAL) -> dict[NodeKey, Node]:
    """The nodes whose GPUs Prometheus has samples of in the last LOOKBACK_S (SEEN_QUERY), with
    their GPUs' identities and newest sample times: what `known` starts from."""
    intervals = intervals or {}
    newest: dict[tuple[NodeKey, str], tuple[Mapping[str, str], float]] = {}
    for s in seen.samples:
        where = (node_key(s.labels), gpu_id(s.labels))
        if where not in newest or newest[where][1] < s.value:
            newest[where] = (s.labels, s.value)
    gpus: dict[NodeKey, list[Gpu]] = {}
    for (key, gid), (labels, when) in newest.items():
        gpus.setdefault(key, []).append(_gpu(gid, labels, {}, when))
    out = {}
    for key, gs in gpus.items():
        interval = intervals.get((key[0], key[1]), default_interval)
        last = max(g.last_sample for g in gs if g.last_sample is not None)
        out[key] = Node(*key, state=GONE, gpus=tuple(sorted(gs, key=lambda g: _natural(g.id))),
                        last_seen=last, scrape_interval=interval)
    return out


# ----------------------------------------------------------------------------------------------
# Asking the server


class Fleet:
    """The fleet as `prometheus` sees it. `open()` checks the server (a `PrometheusError` if it
    is not one) and `refresh()` never raises: a failure is the view's `error`, with the nodes of
    the last good refresh. Blocking: call it from a thread, not the event loop.

    `scrape_interval` overrides the intervals Prometheus' targets list gives (and the default,
    DEFAULT_SCRAPE_INTERVAL, where the server has no such list)."""

    def __init__(self, prometheus: Prometheus, *, scrape_interval: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.prometheus = prometheus
        self.scrape_interval = scrape_interval
        self.clock = clock
        self.view = FleetView()
        self._known: dict[NodeKey, Node] = {}
        self._intervals: dict[tuple[str, str], float] = {}
        self._targets_read: float | None = None  # clock() when last read
        self._targets_supported = scrape_interval is None

    @property
    def url(self) -> str:
        return self.prometheus.url

    @property
    def default_interval(self) -> float:
        if self.scrape_interval:
            return self.scrape_interval
        return max(self._intervals.values(), default=DEFAULT_SCRAPE_INTERVAL)

    def open(self) -> FleetView:
        answer = self.prometheus.query("vector(1)")
        if len(answer.samples) != 1 or answer.samples[0].value != 1:
            raise PrometheusError(f"{self.url} does not evaluate PromQL as Prometheus does")
        self._read_targets()
        try:
            seen = self.prometheus.query(SEEN_QUERY)
        except PrometheusError:
            pass  # an old server or a slow one: nodes already down appear once seen
        else:
            self._known = seen_nodes(seen, intervals=self._intervals,
                                     default_interval=self.default_interval)
        self.view = self._refresh()
        return self.view

    def refresh(self) -> FleetView:
        try:
            self.view = self._refresh()
        except PrometheusError as e:
            self.view = replace(self.view, error=str(e))
        return self.view

    def _refresh(self) -> FleetView:
        values = self.prometheus.query(VALUES_QUERY)
        now = values.time if values.time is not None else self.clock()
        stamps = self.prometheus.query(STAMPS_QUERY, at=now)
        if self._new_targets(values):
            self._read_targets()
        nodes = build_nodes(values, stamps, now=now, known=self._known,
                            intervals=self._intervals, default_interval=self.default_interval)
        self._known = {n.key: n for n in nodes}
        return FleetView(nodes=nodes, findings=fleet_findings(nodes), time=now)

    def _new_targets(self, values: Answer) -> bool:
        """Whether a target appeared whose scrape interval is not known (at most once a minute)."""
        if not self._targets_supported or (
                self._targets_read is not None
                and self.clock() - self._targets_read < TARGETS_EVERY_S):
            return False
        return any((s.labels.get("job", ""), s.labels.get("instance", "")) not in self._intervals
                   for s in values.samples if s.labels.get("__name__") == UP_METRIC)

    def _read_targets(self) -> None:
        if not self._targets_supported:
            return
        self._targets_read = self.clock()
        try:
            targets = self.prometheus.targets()
        except PrometheusError:
            self._targets_supported = False  # Thanos, Mimir...: the default interval applies
            return
        for t in targets:
            if t.scrape_interval:
                self._intervals[(t.job, t.instance)] = t.scrape_interval
