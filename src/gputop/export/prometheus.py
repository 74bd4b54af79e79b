"""Snapshots as Prometheus metrics, without a server: an `ExportState` in, metric families out.

GPU fields keep dcgm-exporter's names, types, units and labels (docs/metrics.md), so dashboards
built for dcgm-exporter read gputop unchanged; processes, Findings and the host get `gputop_`
metrics. A field that is `Missing` has no series: "unknown" is never exported as 0.
"""

from __future__ import annotations

import gzip
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as _openmetrics
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from gputop.diagnose.types import SEVERITIES, Finding
from gputop.model import THROTTLE, DeviceSample, LinkSample, Missing, ProcessSample, Snapshot
from gputop.model.reasons import REASON_BITS
from gputop.model.xid import message as xid_message
from gputop.safetext import printable
from gputop.sources.pod_resources import PodRef, pod_of

MIB = 1 << 20
COMMAND_MAX = 64  # characters of a process name kept in the `command` label
LABEL_MAX = 253  # characters of any other text label: Kubernetes's longest name
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GAUGE, COUNTER = "gauge", "counter"
# dcgm-exporter names the node `Hostname`; its release after 4.x (NVIDIA/dcgm-exporter#655)
# spells it `hostname`. `gputop serve --hostname-label` picks one for every series.
HOSTNAME_LABELS = ("Hostname", "hostname")

Number = float | int
# prometheus_client's OpenMetrics writer and its escapings (the names are those of 0.21 on)
openmetrics_latest = _openmetrics.generate_latest
UNDERSCORES = getattr(_openmetrics, "UNDERSCORES", "underscores")
ALLOW_UTF8 = getattr(_openmetrics, "ALLOWUTF8", "allow-utf-8")


@dataclass(frozen=True)
class ExportState:
    """What one scrape reads: the latest snapshot and what the exporter knows of its polls."""

    snapshot: Snapshot | None = None
    findings: Sequence[Finding] = ()  # open now
    findings_opened: Mapping[str, int] = field(default_factory=dict)  # severity -> since start
    hostname: str = ""  # the host label's value; empty: the snapshot's host
    hostname_label: str = "Hostname"  # or "hostname", as dcgm-exporter after #655
    # GPU (UUID, MIG UUID or index, as the kubelet's device plugin names it) -> the pod the kubelet
    # gave it; empty outside Kubernetes.
    pods: Mapping[str, PodRef] = field(default_factory=dict)
    polled_at: float | None = None  # wall clock when the latest snapshot was taken in
    poll_seconds: float | None = None
    poll_errors: int = 0
    ok: bool = False  # the latest poll succeeded
    stale_after: float = 15.0  # seconds after which the snapshot is too old to export


def hostname(state: ExportState) -> str:
    """The host label's value: the one the exporter was given, else the snapshot's host (a
    recording's contents, so made printable like any text from outside)."""
    snap = state.snapshot
    if state.hostname or snap is None:
        return printable(state.hostname)
    return printable(snap.host.hostname or snap.system.hostname)


class SnapshotCollector(Collector):
    """A prometheus_client collector over the latest state `source` returns. It never polls: a
    scrape costs what turning one snapshot into text costs, however often it comes."""

    def __init__(self, source: Callable[[], ExportState],
                 clock: Callable[[], float] = time.time) -> None:
        self._source = source
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        yield from families(self._source(), self._clock())


def families(state: ExportState, now: float) -> list[Metric]:
    """Every metric family for `state` at wall-clock time `now`."""
    out = _Families()
    node = {state.hostname_label: hostname(state)}
    snap = state.snapshot
    fresh = (snap is not None and state.polled_at is not None
             and now - state.polled_at <= state.stale_after)
    _exporter(out, state, node, up=fresh and state.ok)
    if fresh and snap is not None:
        _devices(out, snap, node, state.pods)
        _processes(out, snap, node, state.pods)
        _findings(out, state, node)
        _host(out, snap, node)
    return out.metrics()


# ----------------------------------------------------------------------------------------------
# Text exposition


def negotiate(collector: Collector, accept: str | None,
              accept_encoding: str | None) -> tuple[bytes, list[tuple[str, str]]]:
    """One scrape's body and headers for what the scraper asked: prometheus_client chooses
    between OpenMetrics and the text format from `Accept` and writes OpenMetrics, and gzips when
    `Accept-Encoding` allows it. The text format is `exposition`'s (see there why)."""
    encoder, content_type = choose_encoder(accept or "")
    if content_type.startswith("application/openmetrics-text"):
        metrics = list(_OpenMetricsView(collector).collect())
        ours = openmetrics(metrics) if _plain_openmetrics(encoder) else None
        body = ours if ours is not None else encoder(_Collected(metrics))
    else:
        body, content_type = exposition(collector.collect()), CONTENT_TYPE
    headers = [("Content-Type", content_type)]
    if gzip_accepted(accept_encoding or ""):
        # Level 1: 0.3 ms for a scrape of 8 GPUs (160 kB), 8.9 kB sent; level 6 takes 1.1 ms
        # for 8.0 kB.
        body = gzip.compress(body, compresslevel=1)
        headers.append(("Content-Encoding", "gzip"))
    headers.append(("Content-Length", str(len(body))))
    return body, headers


class _OpenMetricsView(Collector):
    """The families as OpenMetrics allows them: its counters' samples must end in `_total`, and
    DCGM's (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`) keep dcgm-exporter's names without it, so
    they are typed `unknown` there. Same series, same names, whichever format is asked for."""

    def __init__(self, collector: Collector) -> None:
        self._collector = collector

    def collect(self) -> Iterator[Metric]:
        for m in self._collector.collect():
            if m.type == COUNTER and any(s.name == m.name for s in m.samples):
                plain = Metric(m.name, m.documentation, "unknown", m.unit)
                plain.samples = m.samples
                yield plain
            else:
                yield m


class _Collected(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def _plain_openmetrics(encoder: Callable[..., bytes]) -> bool:
    """Whether `encoder` (choose_encoder's) is prometheus_client's OpenMetrics writer with an
    escaping under which a name of the legacy character set is written as it is."""
    if getattr(encoder, "func", encoder) is not openmetrics_latest:
        return False
    escaping = getattr(encoder, "keywords", {}).get("escaping", UNDERSCORES)
    return escaping in (UNDERSCORES, ALLOW_UTF8)


_LEGACY_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LEGAL: set[str] = set()  # names seen to be of the legacy character set
_GO: dict[Number, str] = {}  # floatToGoString's answers: a scrape repeats many values
_MEMO_MAX = 4096  # entries in each of the two


def openmetrics(metrics: Iterable[Metric]) -> bytes | None:
    """OpenMetrics 1.0 text, byte for byte as prometheus_client's writer gives it (labels
    sorted, every value through floatToGoString, `# EOF` last) with the default escaping, but
    in a tenth of the time: it escapes each sample's name a character at a time, 18 ms a
    scrape of 8 GPUs (Prometheus asks for OpenMetrics) against 1.6 here. None where the metrics hold
    what this writer does not write: a name outside the legacy character set (which the
    escaping would change), an exemplar, a native histogram."""
    out: list[str] = []
    # A GPU's labels are one dict shared by its samples: each is written out once (see
    # `exposition`).
    written: dict[int, tuple[Mapping[str, str], str]] = {}
    go = _GO
    for m in metrics:
        name = m.name
        if not _legal(name):
            return None
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {m.type}\n")
        if m.unit:
            out.append(f"# UNIT {name} {m.unit}\n")
        for s in m.samples:
            if (s.exemplar is not None or getattr(s, "native_histogram", None) is not None
                    or not _legal(s.name)):
                return None
            pairs = ""
            if s.labels:
                known = written.get(id(s.labels))
                if known is None:
                    if not all(map(_legal, s.labels)):
                        return None
                    pairs = ",".join([f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items())])
                    known = written[id(s.labels)] = (s.labels, "{" + pairs + "}")
                pairs = known[1]
            v = s.value
            # Not NaN (never equal to a key) nor a float zero (0.0 and -0.0 are one key)
            keyed = v is not None and (type(v) is int or (v == v and v != 0))
            value = go.get(v) if keyed else None
            if value is None:
                value = "" if v is None else _go_float(v)
                if keyed:
                    if len(go) >= _MEMO_MAX:
                        go.clear()
                    go[v] = value
            stamp = "" if s.timestamp is None else f" {s.timestamp}"
            out.append(f"{s.name}{pairs} {value}{stamp}\n")
    out.append("# EOF\n")
    return "".join(out).encode("utf-8")


def _legal(name: str) -> bool:
    """Whether `name` is of the legacy character set of metric and label names."""
    if name in _LEGAL:
        return True
    if _LEGACY_NAME.fullmatch(name):
        if len(_LEGAL) < _MEMO_MAX:
            _LEGAL.add(name)
        return True
    return False


def exposition(metrics: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4, as dcgm-exporter serves it. Unlike prometheus_client's
    `generate_latest`, a counter's HELP and TYPE lines name its samples: DCGM's counters
    (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`) have no `_total` suffix, and prometheus_client's TYPE
    line would name `..._total`, leaving them untyped. Labels keep the order they were added in."""
    out: list[str] = []
    # A GPU's labels are one dict shared by its samples: each is written out once. The dict is
    # kept with its text, so that its id is not taken by another while this runs.
    written: dict[int, tuple[Mapping[str, str], str]] = {}
    for m in metrics:
        if not m.samples:
            continue
        name = m.name
        if m.type == COUNTER and any(s.name == name + "_total" for s in m.samples):
            name += "_total"
        typ = "untyped" if m.type == "unknown" else m.type
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {typ}\n")
        for s in m.samples:
            if s.labels:
                known = written.get(id(s.labels))
                if known is None:
                    pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                    known = written[id(s.labels)] = (s.labels, pairs)
                out.append(f"{s.name}{{{known[1]}}} {_number(s.value)}\n")
            else:
                out.append(f"{s.name} {_number(s.value)}\n")
    return "".join(out).encode("utf-8")


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


def _go_float(v: Number) -> str:
    return str(floatToGoString(v))  # type: ignore[no-untyped-call]


def _number(v: Number) -> str:
    return str(v) if isinstance(v, int) else _go_float(v)


class _Families:
    """Metric families in the order first seen; a name with no sample is never written."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def add(self, name: str, typ: str, doc: str, labels: dict[str, str],
            value: Number | None) -> None:
        if value is None:
            return
        m = self._by_name.get(name)
        if m is None:
            # prometheus_client names a counter family without its `_total`.
            family = name[:-6] if typ == COUNTER and name.endswith("_total") else name
            m = self._by_name[name] = Metric(family, doc, typ)
        m.samples.append(Sample(name, labels, value))

    def metrics(self) -> list[Metric]:
        return list(self._by_name.values())


# ----------------------------------------------------------------------------------------------
# DCGM-compatible GPU metrics


def _v(x: Any) -> Number | None:
    """A field's value as a number; None where it is Missing."""
    if x is None or isinstance(x, Missing):
        return None
    if isinstance(x, bool):
        return int(x)
    return x  # type: ignore[no-any-return]


def _mib(x: Any) -> int | None:
    return None if x is None or isinstance(x, Missing) else int(x) // MIB


def _ratio(x: Any) -> float | None:
    return None if x is None or isinstance(x, Missing) else x / 100.0


_BIT = {name: bit for bit, name in REASON_BITS.items()}


def _reasons_mask(d: DeviceSample) -> int | None:
    if isinstance(d.throttle, Missing):
        return None
    return sum(_BIT.get(r, 0) for r in set(d.throttle))  # AMD-only reasons have no NVML bit


def _violation(*reasons: str) -> Callable[[DeviceSample], int | None]:
    """A DCGM violation counter (ns) from gputop's cumulative seconds per reason."""

    def get(d: DeviceSample) -> int | None:
        t = d.throttle_time
        if isinstance(t, Missing):
            return None
        got = [t[r] for r in reasons if r in t]
        return round(sum(got) * 1e9) if got else None

    return get


def _fb_used_ratio(d: DeviceSample) -> float | None:
    used, total = _v(d.mem_used), _v(d.mem_total)
    if used is None or total is None:
        return None
    room = total - (_v(d.mem_reserved) or 0)  # DCGM: used / (total - reserved)
    return used / room if room > 0 else None


def _energy_mj(d: DeviceSample) -> int | None:
    e = _v(d.energy_j)
    return None if e is None else round(e * 1000)


Getter = Callable[[DeviceSample], Number | None]

# (name, type, help, value). Help texts follow dcgm-exporter's CSVs where it has the field.
DEVICE_METRICS: tuple[tuple[str, str, str, Getter], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", GAUGE, "SM clock frequency (in MHz).", lambda d: _v(d.clock_sm)),
    ("DCGM_FI_DEV_MEM_CLOCK", GAUGE, "Memory clock frequency (in MHz).",
     lambda d: _v(d.clock_mem)),
    ("DCGM_FI_DEV_MAX_SM_CLOCK", GAUGE, "Maximum supported SM clock (in MHz).",
     lambda d: _v(d.clock_sm_max)),
    ("DCGM_FI_DEV_MAX_MEM_CLOCK", GAUGE, "Maximum supported memory clock (in MHz).",
     lambda d: _v(d.clock_mem_max)),
    ("DCGM_FI_DEV_MEMORY_TEMP", GAUGE, "Memory temperature (in C).", lambda d: _v(d.temp_mem)),
    ("DCGM_FI_DEV_GPU_TEMP", GAUGE, "GPU temperature (in C).", lambda d: _v(d.temp_gpu)),
    ("DCGM_FI_DEV_SLOWDOWN_TEMP", GAUGE, "Slowdown temperature (in C).",
     lambda d: _v(d.temp_slowdown)),
    ("DCGM_FI_DEV_SHUTDOWN_TEMP", GAUGE, "Shutdown temperature (in C).",
     lambda d: _v(d.temp_shutdown)),
    ("DCGM_FI_DEV_GPU_MAX_OP_TEMP", GAUGE, "Maximum operating temperature (in C).",
     lambda d: _v(d.temp_max_operating)),
    ("DCGM_FI_DEV_GPU_TEMP_LIMIT", GAUGE,
     "Thermal margin: degrees left before the nearest slowdown threshold (in C).",
     lambda d: _v(d.temp_margin)),
    ("DCGM_FI_DEV_POWER_USAGE", GAUGE, "Power draw (in W).", lambda d: _v(d.power_draw)),
    ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", GAUGE, "Enforced power limit (in W).",
     lambda d: _v(d.power_limit)),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", GAUGE, "Default power management limit (in W).",
     lambda d: _v(d.power_default_limit)),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", COUNTER,
     "Total energy consumption since boot (in mJ).", _energy_mj),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", COUNTER, "Total number of PCIe retries.",
     lambda d: _v(d.pcie_replays)),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", GAUGE,
     "The rate of data transmitted over the PCIe bus (in bytes per second).",
     lambda d: _v(d.pcie_tx)),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", GAUGE,
     "The rate of data received over the PCIe bus (in bytes per second).",
     lambda d: _v(d.pcie_rx)),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", GAUGE, "PCIe current link generation.",
     lambda d: _v(d.pcie_gen)),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", GAUGE, "PCIe current link width (lanes).",
     lambda d: _v(d.pcie_width)),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", GAUGE, "PCIe maximum link generation.",
     lambda d: _v(d.pcie_gen_max)),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", GAUGE, "PCIe maximum link width (lanes).",
     lambda d: _v(d.pcie_width_max)),
    ("DCGM_FI_DEV_GPU_UTIL", GAUGE, "GPU utilization (in %).", lambda d: _v(d.util_gpu)),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", GAUGE, "Memory utilization (in %).",
     lambda d: _v(d.util_mem)),
    ("DCGM_FI_DEV_ENC_UTIL", GAUGE, "Encoder utilization (in %).", lambda d: _v(d.enc_util)),
    ("DCGM_FI_DEV_DEC_UTIL", GAUGE, "Decoder utilization (in %).", lambda d: _v(d.dec_util)),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GAUGE,
     "Current clock event reasons (bitmask of NVML clocks event reasons).", _reasons_mask),
    ("DCGM_FI_DEV_POWER_VIOLATION", COUNTER,
     "Throttling duration due to power constraints (in ns).", _violation("sw_power_cap")),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", COUNTER,
     "Throttling duration due to thermal constraints (in ns).",
     _violation("sw_thermal", "hw_thermal")),
    ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", COUNTER,
     "Throttling duration due to sync-boost constraints (in ns).", _violation("sync_boost")),
    ("DCGM_FI_DEV_FB_TOTAL", GAUGE, "Framebuffer memory total (in MiB).",
     lambda d: _mib(d.mem_total)),
    ("DCGM_FI_DEV_FB_FREE", GAUGE, "Framebuffer memory free (in MiB).",
     lambda d: _mib(d.mem_free)),
    ("DCGM_FI_DEV_FB_USED", GAUGE, "Framebuffer memory used (in MiB).",
     lambda d: _mib(d.mem_used)),
    ("DCGM_FI_DEV_FB_RESERVED", GAUGE, "Framebuffer memory reserved (in MiB).",
     lambda d: _mib(d.mem_reserved)),
    ("DCGM_FI_DEV_FB_USED_PERCENT", GAUGE,
     "Framebuffer used / (total - reserved), a ratio 0.0-1.0.", _fb_used_ratio),
    ("DCGM_FI_DEV_PSTATE", GAUGE, "Performance state (P-State) 0-15, 0 is the highest.",
     lambda d: _v(d.pstate)),
    ("DCGM_FI_DEV_FAN_SPEED", GAUGE, "Fan speed (in %).", lambda d: _v(d.fan)),
    ("DCGM_FI_DEV_PERSISTENCE_MODE", GAUGE, "Persistence mode (1 enabled).",
     lambda d: _v(d.persistence_mode)),
    ("DCGM_FI_DEV_ECC_CURRENT", GAUGE, "Current ECC mode (1 enabled).",
     lambda d: _v(d.ecc_enabled)),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", COUNTER,
     "Total number of single-bit volatile ECC errors.", lambda d: _v(d.ecc_corrected)),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", COUNTER,
     "Total number of double-bit volatile ECC errors.", lambda d: _v(d.ecc_uncorrected)),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", COUNTER,
     "Number of remapped rows for uncorrectable errors", lambda d: _v(d.remapped_uncorrected)),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", COUNTER,
     "Number of remapped rows for correctable errors", lambda d: _v(d.remapped_corrected)),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", GAUGE, "Whether remapping of rows has failed",
     lambda d: _v(d.remap_failed)),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", GAUGE, "Whether remapping of rows is pending",
     lambda d: _v(d.remap_pending)),
    ("DCGM_FI_DEV_MIG_MODE", GAUGE, "MIG mode (1 enabled).", lambda d: _v(d.mig_enabled)),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GAUGE, "Ratio of time the graphics engine is active.",
     lambda d: _ratio(d.gr_active)),
    ("DCGM_FI_PROF_SM_ACTIVE", GAUGE, "The ratio of cycles an SM has at least 1 warp assigned.",
     lambda d: _ratio(d.sm_active)),
    ("DCGM_FI_PROF_SM_OCCUPANCY", GAUGE, "The ratio of number of warps resident on an SM.",
     lambda d: _ratio(d.sm_occupancy)),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GAUGE, "Ratio of cycles the tensor (HMMA) pipe is active.",
     lambda d: _ratio(d.tensor_active)),
    ("DCGM_FI_PROF_DRAM_ACTIVE", GAUGE,
     "Ratio of cycles the device memory interface is active sending or receiving data.",
     lambda d: _ratio(d.dram_active)),
)

# On a GPU with MIG on, these are exported per MIG instance instead of for the whole GPU.
MIG_METRICS: dict[str, Callable[[Any], Number | None]] = {
    "DCGM_FI_DEV_FB_TOTAL": lambda m: _mib(m.mem_total),
    "DCGM_FI_DEV_FB_USED": lambda m: _mib(m.mem_used),
    "DCGM_FI_DEV_FB_FREE": lambda m: (None if _v(m.mem_total) is None or _v(m.mem_used) is None
                                      else (m.mem_total - m.mem_used) // MIB),
    "DCGM_FI_PROF_SM_ACTIVE": lambda m: _ratio(m.sm_active),
}

NVLINK_ERRORS = (
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "crc_flit",
     "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "crc_data",
     "Total number of NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "replay", "Total number of NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "recovery",
     "Total number of NVLink recovery errors."),
)


def gpu_labels(d: DeviceSample, node: dict[str, str], driver: str) -> dict[str, str]:
    """dcgm-exporter's labels for one GPU, in its order; `node` is the host label."""
    return {"gpu": str(d.index), "UUID": printable(d.uuid), "pci_bus_id": printable(d.pci_bus_id),
            "device": f"{d.vendor}{d.index}", "modelName": printable(d.name), **node,
            "DCGM_FI_DRIVER_VERSION": driver}


def _pod_labels(pod: PodRef | None) -> dict[str, str]:
    """dcgm-exporter's Kubernetes labels, after the others, for a GPU the kubelet gave a pod."""
    if pod is None:
        return {}
    return {"pod": printable(pod.name), "namespace": printable(pod.namespace),
            "container": printable(pod.container)}


def _mig_labels(d: DeviceSample, mig: Any, node: dict[str, str], driver: str,
                pods: Mapping[str, PodRef]) -> dict[str, str]:
    labels = gpu_labels(d, {}, driver)
    del labels["DCGM_FI_DRIVER_VERSION"]
    name = mig.name if isinstance(mig.name, str) else ""
    _, _, profile = name.partition("MIG ")  # "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    labels["GPU_I_PROFILE"] = printable(profile.strip())
    labels["GPU_I_ID"] = str(mig.gpu_instance)
    labels.update(node)
    labels["DCGM_FI_DRIVER_VERSION"] = driver
    uuid = mig.uuid if isinstance(mig.uuid, str) else ""
    labels.update(_pod_labels(pods.get(uuid) or pod_of(pods, d.uuid, d.index)))
    return labels


def _devices(out: _Families, snap: Snapshot, node: dict[str, str],
             pods: Mapping[str, PodRef]) -> None:
    driver = snap.system.driver_version
    driver = printable(driver) if isinstance(driver, str) else ""
    links = _link_totals(snap.links)
    for d in snap.devices:
        labels = gpu_labels(d, node, driver)
        labels.update(_pod_labels(pod_of(pods, d.uuid, d.index)))
        out.add("gputop_gpu_lost", GAUGE, "1 when the GPU has fallen off the bus.", labels,
                int(d.lost is not None))
        _xid(out, d, labels)
        if d.lost is not None:
            continue
        migs = [(m, _mig_labels(d, m, node, driver, pods)) for m in d.mig_devices]
        for name, typ, doc, get in DEVICE_METRICS:
            if migs and name in MIG_METRICS:
                for m, mlabels in migs:
                    out.add(name, typ, doc, mlabels, MIG_METRICS[name](m))
            else:
                out.add(name, typ, doc, labels, get(d))
        _nvlink(out, links.get(d.index), labels)
        _clock_events(out, d, labels)


def _xid(out: _Families, d: DeviceSample, labels: dict[str, str]) -> None:
    """dcgm-exporter's DCGM_FI_DEV_XID_ERRORS: the GPU's last Xid, 0 before any, with the
    `err_code` and `err_msg` labels it adds; and how many came. Only for a GPU whose Xid events
    gputop watches; a lost GPU keeps them (Xid 79 is why it is lost)."""
    if d.vendor != "nvidia" or isinstance(d.xid_count, Missing):
        return
    last = d.xids[-1].xid if d.xids else 0
    out.add("DCGM_FI_DEV_XID_ERRORS", GAUGE, "Value of the last XID error encountered.",
            {**labels, "err_code": str(last), "err_msg": xid_message(last)}, last)
    out.add("gputop_xid_events_total", COUNTER,
            "Xid events the GPU reported since gputop started watching it.", labels,
            d.xid_count)


def _link_totals(links: Sequence[LinkSample]) -> dict[int, dict[str, float]]:
    """Per GPU: rx and tx rates and error counts summed over the links that reported them."""
    out: dict[int, dict[str, float]] = {}
    for lk in links:
        t = out.setdefault(lk.device_index, {})
        for key in ("rx", "tx"):
            v = getattr(lk, key)
            if not isinstance(v, Missing):
                t[key] = t.get(key, 0.0) + v
        if not isinstance(lk.errors, Missing):
            for key, n in lk.errors.items():
                t["err." + key] = t.get("err." + key, 0) + n
    return out


def _nvlink(out: _Families, t: dict[str, float] | None, labels: dict[str, str]) -> None:
    if not t:
        return
    rx, tx = t.get("rx"), t.get("tx")
    out.add("DCGM_FI_PROF_NVLINK_TX_BYTES", GAUGE,
            "The rate of data transmitted over NVLink (in bytes per second).", labels, tx)
    out.add("DCGM_FI_PROF_NVLINK_RX_BYTES", GAUGE,
            "The rate of data received over NVLink (in bytes per second).", labels, rx)
    if rx is not None or tx is not None:
        # DCGM's own arithmetic: KiB/s divided by 1000, receive and transmit together, a whole
        # number; typed counter as dcgm-exporter's CSV types it, though DCGM fills it with a rate.
        out.add("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", COUNTER,
                "Total number of NVLink bandwidth counters for all lanes.",
                labels, int(((rx or 0.0) + (tx or 0.0)) / 1024 / 1000))
    for name, key, doc in NVLINK_ERRORS:
        n = t.get("err." + key)
        out.add(name, COUNTER, doc, labels, None if n is None else int(n))


def _clock_events(out: _Families, d: DeviceSample, labels: dict[str, str]) -> None:
    if not isinstance(d.throttle, Missing):
        active = set(d.throttle)
        for reason in THROTTLE:
            out.add("gputop_clock_event_active", GAUGE,
                    "1 while this clock event reason (throttle) holds the GPU's clocks down.",
                    {**labels, "reason": reason}, int(reason in active))
    if not isinstance(d.throttle_time, Missing):
        for reason, seconds in d.throttle_time.items():
            out.add("gputop_clock_event_seconds_total", COUNTER,
                    "Time the clocks were held down for this reason, since driver load (s).",
                    {**labels, "reason": printable(reason)}, seconds)


# ----------------------------------------------------------------------------------------------
# gputop's own metrics


def _exporter(out: _Families, state: ExportState, node: dict[str, str], *, up: bool) -> None:
    out.add("gputop_up", GAUGE,
            "1 when gputop's latest poll succeeded and is recent enough to export.", node,
            int(up))
    snap = state.snapshot
    if snap is not None:
        out.add("gputop_last_poll_timestamp_seconds", GAUGE,
                "When the latest snapshot was taken (epoch seconds).", node, snap.time)
        s = snap.system
        out.add("gputop_info", GAUGE, "gputop and the GPU software it reads.",
                {**node, "version": printable(s.gputop_version),
                 "driver_version": _text(s.driver_version),
                 "cuda_version": _text(s.cuda_version),
                 "backends": printable(",".join(s.backends))}, 1)
    out.add("gputop_poll_duration_seconds", GAUGE,
            "How long the latest poll and its diagnostics took (s).", node, state.poll_seconds)
    out.add("gputop_poll_errors_total", COUNTER, "Polls that failed since the exporter started.",
            node, state.poll_errors)


def _text(v: Any) -> str:
    """A label value from text of the host: printable, and at most LABEL_MAX characters (a
    process sets its own POD_NAME, as long as it likes)."""
    if not isinstance(v, str):
        return ""
    text = printable(v[:LABEL_MAX])
    return text if len(text) <= LABEL_MAX else text[:LABEL_MAX - 1] + "…"


def command(p: ProcessSample) -> str:
    """The `command` label: the process name, made printable and cut to COMMAND_MAX."""
    name = p.name if isinstance(p.name, str) else ""
    if not name and not isinstance(p.cmdline, Missing) and p.cmdline:
        name = p.cmdline[0].rsplit("/", 1)[-1]
    name = printable(name)
    return name if len(name) <= COMMAND_MAX else name[:COMMAND_MAX - 1] + "…"


def process_labels(p: ProcessSample, uuid: str, node: dict[str, str],
                   gpu_pod: PodRef | None = None) -> dict[str, str]:
    """A process's labels. Its pod and namespace come from its environment (the downward API);
    where that is not readable, a process in a pod (its cgroup says so) on a GPU the kubelet gave
    a pod is named after that pod."""
    job = p.job
    container = pod = pod_uid = namespace = hpc_job = ""
    if job is not None:
        container = _text((job.container_id or "")[:12])
        pod = _text(job.pod_name)
        pod_uid = _text(job.pod_uid)
        namespace = _text(job.pod_namespace)
        hpc_job = _text(job.slurm_job_id)
        if job.pod_uid and not pod and gpu_pod is not None:
            pod, namespace = _text(gpu_pod.name), _text(gpu_pod.namespace)
    return {"gpu": str(p.device_index), "UUID": uuid, **node, "pid": str(p.pid),
            "command": command(p), "user": _text(p.user), "container": container, "pod": pod,
            "pod_uid": pod_uid, "namespace": namespace, "hpc_job": hpc_job}


def _processes(out: _Families, snap: Snapshot, node: dict[str, str],
               pods: Mapping[str, PodRef]) -> None:
    gpus = {d.index: d for d in snap.devices}
    seen: set[tuple[int, int]] = set()
    for p in snap.processes:
        if (p.device_index, p.pid) in seen:
            continue
        seen.add((p.device_index, p.pid))
        d = gpus.get(p.device_index)
        uuid = printable(d.uuid) if d is not None else ""
        gpu_pod = pod_of(pods, d.uuid, d.index) if d is not None else None
        labels = process_labels(p, uuid, node, gpu_pod)
        out.add("gputop_process_gpu_memory_bytes", GAUGE,
                "GPU memory a process holds on this GPU (bytes).", labels, _v(p.gpu_mem))
        out.add("gputop_process_sm_utilization_percent", GAUGE,
                "Share of time a kernel of this process ran on this GPU's SMs (in %).", labels,
                _v(p.sm_util))
        out.add("gputop_process_cpu_percent", GAUGE,
                "Host CPU the process uses (in % of one core).", labels, _v(p.cpu_percent))


def _findings(out: _Families, state: ExportState, node: dict[str, str]) -> None:
    counts = dict.fromkeys(SEVERITIES, 0)
    seen: set[tuple[str, ...]] = set()
    for f in state.findings:
        if not f.open:
            continue
        counts[f.severity] = counts.get(f.severity, 0) + 1
        labels = {"id": printable(f.id), "severity": f.severity,
                  "gpu": "" if f.device is None else str(f.device),
                  "pid": "" if f.pid is None else str(f.pid), **node}
        key = tuple(labels.values())
        if key in seen:
            continue
        seen.add(key)
        out.add("gputop_finding_open", GAUGE,
                "1 while a Finding of gputop's diagnostics is open.", labels, 1)
    for severity, n in counts.items():
        out.add("gputop_findings_open", GAUGE, "Findings open now, by severity.",
                {"severity": severity, **node}, n)
    for severity in counts:
        out.add("gputop_findings_total", COUNTER,
                "Findings opened since the exporter started, by severity.",
                {"severity": severity, **node},
                state.findings_opened.get(severity, 0))


def _host(out: _Families, snap: Snapshot, node: dict[str, str]) -> None:
    h = snap.host
    out.add("gputop_host_cpu_percent", GAUGE, "Host CPU busy, all cores (in %).", node,
            _v(h.cpu_percent))
    out.add("gputop_host_cpus", GAUGE, "Host logical CPUs.", node, h.cpu_count or None)
    out.add("gputop_host_iowait_percent", GAUGE, "Host CPU time waiting for I/O (in %).", node,
            _v(h.iowait_percent))
    if not isinstance(h.load_avg, Missing):
        for name, v in zip(("load1", "load5", "load15"), h.load_avg):
            out.add(f"gputop_host_{name}", GAUGE, f"Host load average ({name[4:]} min).", node, v)
    for name, doc, amount in (("memory_total", "Host memory total", h.mem_total),
                              ("memory_used", "Host memory used", h.mem_used),
                              ("memory_available", "Host memory available", h.mem_available),
                              ("swap_used", "Host swap used", h.swap_used)):
        out.add(f"gputop_host_{name}_bytes", GAUGE, f"{doc} (bytes).", node, _v(amount))
    for resource, share in (("cpu", h.psi_cpu_some), ("io", h.psi_io_some),
                            ("memory", h.psi_mem_some)):
        out.add("gputop_host_pressure_some_percent", GAUGE,
                "Pressure stall: share of time some task waited on the resource, avg10 (in %).",
                {**node, "resource": resource}, _v(share))
