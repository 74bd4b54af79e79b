"""The Snapshot: the one thing that crosses from collection to the rest of gputop.

One frozen `Snapshot` per tick. Every measured field holds either its value or a `Missing` that says
why there is none (unsupported, needs privilege, GPU lost, stale since T, not sampled yet, error).
A recording is a sequence of Snapshots, and so is a test fixture.

`to_dict` / `from_dict` give the documented JSON shape (docs/json.md): measured fields that are
missing appear as `null`, and the object's `unavailable` map says why.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, Union

SCHEMA = "gputop.snapshot/1"

T = TypeVar("T")

REASONS = (
    "unsupported",  # the device, driver or VM does not offer it; not asked again
    "no_permission",  # needs privileges gputop does not have
    "gpu_lost",  # the GPU fell off the bus
    "stale",  # the last value is older than the poll; `since` says from when
    "pending",  # on a slower cadence and not sampled yet
    "not_visible",  # process in another PID namespace (a container): host facts unknown
    "error",  # the call failed; `detail` says how
)


@dataclass(frozen=True, slots=True)
class Missing:
    """Why a field has no value."""

    reason: str
    since: float | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown Missing reason {self.reason!r}")

    def __bool__(self) -> bool:
        return False

    def label(self) -> str:
        """A short word for a table cell: never a bare "N/A"."""
        return _LABELS[self.reason]


_LABELS = {
    "unsupported": "n/s",
    "no_permission": "no perm",
    "gpu_lost": "LOST",
    "stale": "stale",
    "pending": "…",
    "not_visible": "hidden",
    "error": "err",
}

UNSUPPORTED = Missing("unsupported")
PENDING = Missing("pending")

Val = Union[T, Missing]  # noqa: UP007 - a generic alias: Val[int]


def present(v: Any) -> bool:
    return not isinstance(v, Missing)


def value(v: Val[T], default: Any = None) -> T | Any:
    return default if isinstance(v, Missing) else v


# ----------------------------------------------------------------------------------------------
# Samples


@dataclass(frozen=True, slots=True)
class MigDevice:
    gpu_instance: int
    compute_instance: int
    uuid: Val[str] = PENDING
    name: Val[str] = PENDING
    mem_total: Val[int] = PENDING  # bytes
    mem_used: Val[int] = PENDING
    sm_active: Val[float] = PENDING  # % (GPM per instance)

    _measured: ClassVar[tuple[str, ...]] = ("uuid", "name", "mem_total", "mem_used", "sm_active")


@dataclass(frozen=True, slots=True)
class XidEvent:
    """An Xid error the NVIDIA driver reported for a GPU (docs.nvidia.com/deploy/xid-errors)."""

    xid: int
    time: float  # epoch seconds when gputop received it


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One GPU at one tick. Units: bytes, °C, W, MHz, %, bytes/s."""

    index: int
    vendor: str  # "nvidia" | "amd"
    name: str
    uuid: str
    pci_bus_id: str
    lost: Missing | None = None  # Missing("gpu_lost", since=T) once the GPU fell off the bus

    util_gpu: Val[float] = PENDING  # % of time a kernel ran (NVML: copies count as busy too)
    util_mem: Val[float] = PENDING  # % of time device memory was read or written
    mem_total: Val[int] = PENDING
    mem_used: Val[int] = PENDING  # used by processes (NVML v2 "used")
    mem_reserved: Val[int] = PENDING  # held by driver and firmware (NVML v2 "reserved")
    mem_free: Val[int] = PENDING
    temp_gpu: Val[float] = PENDING
    temp_mem: Val[float] = PENDING
    temp_slowdown: Val[float] = PENDING  # HW slowdown threshold
    temp_shutdown: Val[float] = PENDING
    temp_max_operating: Val[float] = PENDING  # GPU max operating temperature (SW slowdown)
    temp_margin: Val[float] = PENDING  # °C left before the nearest slowdown threshold
    power_draw: Val[float] = PENDING  # W
    power_limit: Val[float] = PENDING  # enforced limit, W
    power_default_limit: Val[float] = PENDING
    energy_j: Val[float] = PENDING  # since driver load
    clock_sm: Val[int] = PENDING
    clock_sm_max: Val[int] = PENDING
    clock_mem: Val[int] = PENDING
    clock_mem_max: Val[int] = PENDING
    pstate: Val[int] = PENDING
    fan: Val[float] = PENDING  # %
    persistence_mode: Val[bool] = PENDING
    compute_capability: Val[str] = PENDING
    throttle: Val[tuple[str, ...]] = PENDING  # active clock-event reasons (model.reasons)
    throttle_time: Val[Mapping[str, float]] = PENDING  # cumulative seconds per reason
    pcie_gen: Val[int] = PENDING
    pcie_gen_max: Val[int] = PENDING
    pcie_width: Val[int] = PENDING
    pcie_width_max: Val[int] = PENDING
    pcie_rx: Val[float] = PENDING  # bytes/s
    pcie_tx: Val[float] = PENDING
    pcie_replays: Val[int] = PENDING
    enc_util: Val[float] = PENDING
    dec_util: Val[float] = PENDING
    ecc_enabled: Val[bool] = PENDING
    ecc_corrected: Val[int] = PENDING  # volatile (since driver load)
    ecc_uncorrected: Val[int] = PENDING
    remapped_corrected: Val[int] = PENDING
    remapped_uncorrected: Val[int] = PENDING
    remap_pending: Val[bool] = PENDING
    remap_failed: Val[bool] = PENDING
    # Over the GPU's life (kept in its InfoROM): what one moment can tell about a GPU's health.
    ecc_corrected_aggregate: Val[int] = PENDING
    ecc_uncorrected_aggregate: Val[int] = PENDING
    # Uncorrected errors by where they struck: SRAM (on-chip: register files, caches) or DRAM
    # (device memory), volatile and aggregate. Before Ampere, "device memory" is the DRAM.
    ecc_uncorrected_sram: Val[int] = PENDING
    ecc_uncorrected_dram: Val[int] = PENDING
    ecc_uncorrected_sram_aggregate: Val[int] = PENDING
    ecc_uncorrected_dram_aggregate: Val[int] = PENDING
    ecc_sram_threshold_exceeded: Val[bool] = PENDING  # the GPU says: too many SRAM errors
    # Pages of device memory retired (before Ampere; remapped rows replaced them)
    retired_single_bit: Val[int] = PENDING  # after multiple single-bit errors
    retired_double_bit: Val[int] = PENDING
    retire_pending: Val[bool] = PENDING  # a retirement waits for the next driver load
    mig_enabled: Val[bool] = PENDING
    mig_devices: tuple[MigDevice, ...] = ()
    gr_active: Val[float] = PENDING  # GPM (Hopper+): % time the graphics/compute engine was busy
    sm_active: Val[float] = PENDING  # GPM: % of SMs busy
    sm_occupancy: Val[float] = PENDING  # GPM: warps resident vs max
    tensor_active: Val[float] = PENDING  # GPM: tensor pipes busy
    dram_active: Val[float] = PENDING  # GPM: % of peak DRAM bandwidth
    numa_node: Val[int] = PENDING
    cpu_affinity: Val[str] = PENDING  # CPU list, e.g. "0-51,104-155"
    # Xid events since gputop began watching the GPU. A recording made before gputop watched
    # them has neither field: 0 and () there, no events.
    xid_count: Val[int] = 0
    xids: tuple[XidEvent, ...] = ()  # oldest first: the last hour's (at most 16), or the latest

    _measured: ClassVar[tuple[str, ...]] = ()  # filled below
    _nested: ClassVar[dict[str, type]] = {"mig_devices": MigDevice, "xids": XidEvent}
    # Left out of the record form while they hold these values: a recording without Xids reads
    # and writes as one made before gputop watched them, and one whose source never read the
    # lifetime ECC and retired-page fields as one made before gputop had them.
    _record_defaults: ClassVar[dict[str, Any]] = {
        "xid_count": 0, "xids": [],
        **dict.fromkeys(("ecc_corrected_aggregate", "ecc_uncorrected_aggregate",
                         "ecc_uncorrected_sram", "ecc_uncorrected_dram",
                         "ecc_uncorrected_sram_aggregate", "ecc_uncorrected_dram_aggregate",
                         "ecc_sram_threshold_exceeded", "retired_single_bit",
                         "retired_double_bit", "retire_pending"), PENDING),
    }


DeviceSample._measured = tuple(
    f.name for f in dataclasses.fields(DeviceSample)
    if f.name not in ("index", "vendor", "name", "uuid", "pci_bus_id", "lost", "mig_devices",
                      "xids")
)

@dataclass(frozen=True, slots=True)
class JobInfo:
    """Where a process runs: container, Kubernetes pod, Slurm job. None means "not in one"."""

    container_id: str | None = None
    container_runtime: str | None = None  # docker, containerd, cri-o, podman, lxc
    pod_uid: str | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None
    slurm_job_id: str | None = None
    systemd_unit: str | None = None

    def label(self) -> str:
        if self.slurm_job_id:
            return f"slurm:{self.slurm_job_id}"
        if self.pod_name:
            return f"pod:{self.pod_namespace + '/' if self.pod_namespace else ''}{self.pod_name}"
        if self.pod_uid:
            return f"pod:{self.pod_uid[:8]}"
        if self.container_id:
            return f"{self.container_runtime or 'ctr'}:{self.container_id[:12]}"
        return ""


@dataclass(frozen=True, slots=True)
class ChildProcess:
    """A child of a GPU process with no GPU context of its own: a DataLoader worker, usually."""

    pid: int
    name: str
    cpu_percent: float
    rss: int


# A probe publishes every second (docs/probe.md); a payload older than this is a hung or gone
# process, for the reader of the probe files and for the memory split alike.
PROBE_STALE_AFTER_S = 5.0


@dataclass(frozen=True, slots=True)
class ProbeStats:
    """What the in-process probe (gputop.probe) published for a process: PyTorch's allocator and
    the training loop, which NVML cannot see. Bytes; None where the process has no CUDA."""

    ts: float
    device: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    active: int | None = None
    inactive_split: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    num_alloc_retries: int | None = None
    num_ooms: int | None = None
    allocator_conf: str | None = None
    steps: int = 0
    step_time_s: float | None = None
    loader_wait_s: float = 0.0
    wait_frac: float | None = None  # over the last 50 steps
    # over the last few steps (at least 5 and 5 s); None from a probe or recording before it
    recent_wait_frac: float | None = None
    batch_sizes: tuple[tuple[int, int], ...] = ()  # (batch size, step peak allocated)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process on one GPU. A process on two GPUs appears twice."""

    pid: int
    device_index: int
    kind: str = "compute"  # compute | graphics | compute+graphics
    gpu_mem: Val[int] = PENDING  # bytes (NVML: allocator reserved + CUDA context)
    sm_util: Val[float] = PENDING
    mem_util: Val[float] = PENDING
    gpu_instance: int | None = None  # MIG
    compute_instance: int | None = None
    # From the host; Missing("not_visible") when the PID lives in another PID namespace.
    user: Val[str] = PENDING
    name: Val[str] = PENDING
    cmdline: Val[tuple[str, ...]] = PENDING
    cpu_percent: Val[float] = PENDING
    rss: Val[int] = PENDING
    create_time: Val[float] = PENDING  # epoch seconds
    job: JobInfo | None = None
    children: tuple[ChildProcess, ...] = ()
    probe: ProbeStats | None = None

    _measured: ClassVar[tuple[str, ...]] = (
        "gpu_mem", "sm_util", "mem_util", "user", "name", "cmdline", "cpu_percent", "rss",
        "create_time",
    )
    _nested: ClassVar[dict[str, type]] = {"job": JobInfo, "children": ChildProcess,
                                          "probe": ProbeStats}

    @property
    def key(self) -> str:
        return f"{self.device_index}:{self.pid}"


@dataclass(frozen=True, slots=True)
class LinkSample:
    """One GPU interconnect link (NVLink or xGMI) of one device."""

    device_index: int
    link: int
    kind: str  # nvlink | xgmi
    up: Val[bool] = PENDING
    version: Val[str] = PENDING
    remote_bus_id: Val[str] = PENDING
    remote_kind: Val[str] = PENDING  # gpu | switch | cpu | unknown
    speed: Val[float] = PENDING  # bytes/s per direction, nominal
    rx: Val[float] = PENDING  # bytes/s
    tx: Val[float] = PENDING
    errors: Val[Mapping[str, int]] = PENDING  # cumulative: crc_flit, crc_data, replay, recovery

    _measured: ClassVar[tuple[str, ...]] = (
        "up", "version", "remote_bus_id", "remote_kind", "speed", "rx", "tx", "errors",
    )

    @property
    def key(self) -> str:
        return f"{self.device_index}:{self.link}"


@dataclass(frozen=True, slots=True)
class Topology:
    """GPU-to-GPU paths as `nvidia-smi topo -m` shows them: X, NV#, PIX, PXB, PHB, NODE, SYS."""

    matrix: tuple[tuple[str, ...], ...] = ()
    cpu_affinity: tuple[str, ...] = ()
    numa_affinity: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HostSample:
    hostname: str = ""
    cpu_count: int = 0
    cpu_percent: Val[float] = PENDING
    cpu_percent_per_core: tuple[float, ...] = ()
    iowait_percent: Val[float] = PENDING
    load_avg: Val[tuple[float, float, float]] = PENDING
    mem_total: Val[int] = PENDING
    mem_used: Val[int] = PENDING
    mem_available: Val[int] = PENDING
    swap_used: Val[int] = PENDING
    psi_cpu_some: Val[float] = PENDING  # /proc/pressure/cpu some avg10, %
    psi_io_some: Val[float] = PENDING
    psi_mem_some: Val[float] = PENDING

    _measured: ClassVar[tuple[str, ...]] = (
        "cpu_percent", "iowait_percent", "load_avg", "mem_total", "mem_used", "mem_available",
        "swap_used", "psi_cpu_some", "psi_io_some", "psi_mem_some",
    )


@dataclass(frozen=True, slots=True)
class SystemInfo:
    """Slow facts about the node and its GPU software."""

    hostname: str = ""
    backends: tuple[str, ...] = ()  # e.g. ("nvml",)
    driver_version: Val[str] = PENDING
    cuda_version: Val[str] = PENDING  # CUDA driver API version, e.g. "13.0"
    nvml_version: Val[str] = PENDING
    rocm_version: Val[str] = PENDING
    gputop_version: str = ""

    _measured: ClassVar[tuple[str, ...]] = (
        "driver_version", "cuda_version", "nvml_version", "rocm_version",
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    time: float  # epoch seconds when the tick was taken
    system: SystemInfo
    host: HostSample
    devices: tuple[DeviceSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    links: tuple[LinkSample, ...] = ()
    topology: Topology | None = None
    warnings: tuple[str, ...] = ()  # what the user should know this tick (a GPU lost...)

    _nested: ClassVar[dict[str, type]] = {
        "system": SystemInfo,
        "host": HostSample,
        "devices": DeviceSample,
        "processes": ProcessSample,
        "links": LinkSample,
        "topology": Topology,
    }

    def device(self, index: int) -> DeviceSample | None:
        for d in self.devices:
            if d.index == index:
                return d
        return None

    def processes_on(self, index: int) -> tuple[ProcessSample, ...]:
        return tuple(p for p in self.processes if p.device_index == index)

    def to_dict(self, *, drop_nulls: bool = False, memo: DictMemo | None = None
                ) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": SCHEMA}
        out.update(to_dict(self, drop_nulls=drop_nulls, memo=memo))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Snapshot:
        schema = d.get("schema", SCHEMA)
        if not isinstance(schema, str) or not schema.startswith("gputop.snapshot/"):
            raise ValueError(f"not a gputop snapshot (schema {schema!r})")
        return from_dict(cls, d)


# ----------------------------------------------------------------------------------------------
# JSON shape: plain values, measured fields missing -> null plus "unavailable": {field: {...}}.


def missing_to_dict(m: Missing) -> dict[str, Any]:
    out: dict[str, Any] = {"reason": m.reason}
    if m.since is not None:
        out["since"] = m.since
    if m.detail:
        out["detail"] = m.detail
    return out


def missing_from_dict(d: Mapping[str, Any]) -> Missing:
    return Missing(str(d["reason"]), d.get("since"), str(d.get("detail", "")))


_SCALARS = (int, float, str, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)  # exactly these types: a set lookup, the common case
_NO_DEFAULTS: dict[str, Any] = {}
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _plain(v: Any) -> Any:
    if isinstance(v, _SCALARS):
        return v
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if dataclasses.is_dataclass(v):
        return to_dict(v)
    return v


class DictMemo:
    """The JSON shapes of the last tick's objects, for shaping the next tick's: a source hands
    the very same object again when nothing in it changed (an NVLink between two slow ticks),
    and its shape is then not built again; a list of the very same objects as last tick's is
    the very same list. Holds the objects, so their ids stay theirs; keeps one tick.

    With `like` (for some classes, the fields that say which item an object is from tick to tick:
    a GPU's index, a link's GPU and number), a new object of such a class is shaped from the dict
    of last tick's object of the same item, changing only the fields whose values are not the
    very same objects: a GPU of 60-odd fields of which a handful moved. Where a field changes in
    a way that moves other keys (a value becomes missing, a default) it is shaped afresh. A
    caller that changes the dicts it gets (rounds them) must do so field by field, alike for
    alike values, and idempotently. A memo serves one value of to_dict's `drop_nulls`."""

    def __init__(self, like: Mapping[type, tuple[str, ...]] | None = None) -> None:
        self._like = {cls: (operator.attrgetter(*parts) if parts else None,
                            operator.attrgetter(*_names(cls)), _names(cls),
                            getattr(cls, "_record_defaults", _NO_DEFAULTS))
                      for cls, parts in (like or {}).items()}
        # Last tick's and this tick's: by id, of the classes not in `like`; by class and item,
        # with the fields' values, of those in it; the lists of those.
        self._last: dict[int, _Shaped] = {}
        self._this: dict[int, _Shaped] = {}
        self._last_items: dict[type, dict[Any, _Shaped]] = {}
        self._this_items: dict[type, dict[Any, _Shaped]] = {}
        self._last_lists: dict[type, tuple[tuple[Any, ...], list[dict[str, Any]]]] = {}
        self._this_lists: dict[type, tuple[tuple[Any, ...], list[dict[str, Any]]]] = {}
        self.built: set[int] = set()  # ids of the dicts built this tick (not reused)
        # Of the dicts built this tick from last tick's: that dict, and the keys that may differ
        # from it (the others are its very values).
        self.since: dict[int, tuple[dict[str, Any], list[str]]] = {}

    def shape(self, obj: Any, drop_nulls: bool) -> dict[str, Any]:
        cls = type(obj)
        like = self._like.get(cls)
        if like is None:
            hit = self._last.get(id(obj))
            if hit is None or hit[0] is not obj:
                hit = (obj, (), to_dict(obj, drop_nulls=drop_nulls))
                self.built.add(id(hit[2]))
            self._this[id(obj)] = hit
            return hit[2]
        key = like[0](obj) if like[0] is not None else None
        last = self._last_items.get(cls, _NO_ITEMS).get(key)
        this = self._this_items.setdefault(cls, {})
        if last is not None and last[0] is obj:
            this[key] = last
            return last[2]
        values = like[1](obj)
        got = None
        if last is not None:
            got = _shape_since(like[2], like[3], last[1], last[2], values, drop_nulls)
            if got is not None and got[0] is not last[2]:
                self.since[id(got[0])] = (last[2], got[1])
        d = to_dict(obj, drop_nulls=drop_nulls) if got is None else got[0]
        if last is None or d is not last[2]:
            self.built.add(id(d))
        this[key] = (obj, values, d)
        return d

    def shape_all(self, items: tuple[Any, ...], drop_nulls: bool) -> list[dict[str, Any]]:
        """The shapes of a tuple of objects: the very list of last tick's when they are the very
        same objects, of a class in `like`."""
        cls = type(items[0])
        if cls not in self._like:
            return [self.shape(x, drop_nulls) for x in items]
        last = self._last_lists.get(cls)
        if (last is not None and len(last[0]) == len(items)
                and all(map(operator.is_, last[0], items))):
            self._this_items.setdefault(cls, {}).update(self._last_items.get(cls, _NO_ITEMS))
        else:
            last = (items, [self.shape(x, drop_nulls) for x in items])
        self._this_lists[cls] = last
        return last[1]

    def next_tick(self) -> None:
        self._last, self._this = self._this, {}
        self._last_items, self._this_items = self._this_items, {}
        self._last_lists, self._this_lists = self._this_lists, {}
        self.built = set()
        self.since = {}


_Shaped = tuple[Any, tuple[Any, ...], dict[str, Any]]  # an object, its fields' values, its shape
_NO_ITEMS: dict[Any, _Shaped] = {}


_SIMPLE = frozenset((int, float, str, bool))
_NOT_SIMPLE = object()


def _simple_shape(v: Any, drop_nulls: bool) -> Any:
    """What to_dict puts for a value that is neither missing nor None, where it is simple to
    tell: a number, a string, an object, a tuple of objects, or a tuple or a dict of numbers and
    strings; else _NOT_SIMPLE."""
    t = type(v)
    if t in _SIMPLE:
        return v
    if t is tuple:
        if v and dataclasses.is_dataclass(v[0]):
            return [to_dict(x, drop_nulls=drop_nulls) for x in v]
        return list(v) if all(type(x) in _SIMPLE for x in v) else _NOT_SIMPLE
    if t is dict and all(type(k) is str and type(x) in _SIMPLE for k, x in v.items()):
        return dict(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, (type, Missing)):
        return to_dict(v, drop_nulls=drop_nulls)
    return _NOT_SIMPLE


def _shape_since(names: tuple[str, ...], defaults: Mapping[str, Any], before: tuple[Any, ...],
                 last: dict[str, Any], now: tuple[Any, ...],
                 drop_nulls: bool) -> tuple[dict[str, Any], list[str]] | None:
    """to_dict of an object whose fields (`names`, their record defaults `defaults`) are `now`,
    from `last`, the dict of one whose fields were `before`: the fields that are not the very
    same objects are put again, in their places. With it, the keys put. `last` itself when no
    field is; None where one would move keys (a missing value, a null, a default)."""
    out: dict[str, Any] | None = None
    put: list[str] = []
    # Only the fields that are not the very same objects (itertools and operator: no step in
    # Python for the others, most of them).
    moved = map(operator.is_not, before, now)
    for name, a, b in itertools.compress(zip(names, before, now), moved):
        if out is None:
            out = dict(last)
        if type(b) in _SIMPLE and type(a) in _SIMPLE and name not in defaults and name in out:
            out[name] = b  # a number for a number: the common case
            put.append(name)
            continue
        if type(a) is Missing and type(b) is Missing and a.since is b.since and (
                a.reason == b.reason and a.detail == b.detail):
            continue  # the same reason again: the same "unavailable" entry
        if a is None or isinstance(a, Missing) or name in defaults or name not in out:
            return None
        v = _simple_shape(b, drop_nulls)
        if v is _NOT_SIMPLE:
            return None
        out[name] = v
        put.append(name)
    return (last, put) if out is None else (out, put)


def to_dict(obj: Any, *, drop_nulls: bool = False, memo: DictMemo | None = None
            ) -> dict[str, Any]:
    """The JSON shape. With `drop_nulls`, keys whose value is null are left out, and so are the
    fields a class names in `_record_defaults` while they hold those values (record form). With
    `memo`, the items of lists of objects are shaped through it (the caller must not change the
    dicts it returns, or must change them the same way every tick). The objects a tick holds
    one of (the system facts, the topology, the host) go through `memo` too."""
    out: dict[str, Any] = {}
    unavailable: dict[str, Any] = {}
    defaults: dict[str, Any] = getattr(obj, "_record_defaults", _NO_DEFAULTS)
    for name in _names(type(obj)):
        v = getattr(obj, name)
        t = type(v)
        if t in _SCALAR_TYPES or (t is not Missing and isinstance(v, _SCALARS)):
            if v is not None or not drop_nulls:
                out[name] = v
        elif t is Missing or isinstance(v, Missing):
            if name == "lost":
                out[name] = missing_to_dict(v)
                continue
            if not drop_nulls:
                out[name] = None
            elif v == defaults.get(name):
                continue
            unavailable[name] = missing_to_dict(v)
        elif isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
            if memo is None:
                out[name] = [to_dict(x, drop_nulls=drop_nulls) for x in v]
            else:
                out[name] = memo.shape_all(v, drop_nulls)
        elif dataclasses.is_dataclass(v):
            out[name] = (to_dict(v, drop_nulls=drop_nulls) if memo is None
                         else memo.shape(v, drop_nulls))
        else:
            out[name] = _plain(v)
    if unavailable:
        out["unavailable"] = unavailable
    if drop_nulls:
        for name, default in defaults.items():
            if out.get(name, out) == default:
                del out[name]
    return out


_TUPLE_OF_TUPLES = {"matrix", "batch_sizes"}


def _unplain(name: str, v: Any) -> Any:
    if isinstance(v, list):
        if name in _TUPLE_OF_TUPLES:
            return tuple(tuple(row) for row in v)
        return tuple(v)
    return v


# How `from_dict` reads each field of a class, worked out once per class: recordings are read
# a tick at a time, tens of thousands of ticks, and this is where reading spends its time.
_PLAIN, _MEASURED, _LOST, _NESTED, _ROWS = range(5)
_PLANS: dict[type, dict[str, tuple[int, Any]]] = {}
# Classes whose fields are all values (no nested objects): their names, else None.
_FLAT: dict[type, frozenset[str] | None] = {}
_MISSING: dict[tuple[Any, ...], Missing] = {}  # the same few reasons over and over


def _plan(cls: type) -> dict[str, tuple[int, Any]]:
    plan = _PLANS.get(cls)
    if plan is None:
        nested: dict[str, type] = getattr(cls, "_nested", {})
        measured = set(getattr(cls, "_measured", ()))
        plan = {}
        for name in _names(cls):
            if name == "lost":
                plan[name] = (_LOST, None)
            elif name in nested:
                plan[name] = (_NESTED, nested[name])
            elif name in _TUPLE_OF_TUPLES:
                plan[name] = (_ROWS, None)
            else:
                plan[name] = (_MEASURED if name in measured else _PLAIN, None)
        _PLANS[cls] = plan
        flat = all(how[0] <= _MEASURED for how in plan.values())
        _FLAT[cls] = frozenset(plan) if flat else None
    return plan


def _missing(d: Mapping[str, Any]) -> Missing:
    since = d.get("since")
    key = (d.get("reason"), since, type(since), d.get("detail", ""))
    try:
        m = _MISSING.get(key)
    except TypeError:  # an unhashable value in a damaged file
        return missing_from_dict(d)
    if m is None:
        m = missing_from_dict(d)
        if len(_MISSING) < 4096:
            _MISSING[key] = m
    return m


_BUILDERS: dict[type, Callable[[Mapping[str, Any]], Any]] = {}


def _builder(cls: type[T]) -> Callable[[Mapping[str, Any]], T]:
    """`lambda kw: cls(**kw)` for a frozen slotted dataclass, with keys that are not fields
    ignored, but twice as fast: the dataclass __init__ of a frozen class sets each field through
    object.__setattr__, and building Snapshots is most of what reading a recording costs. The
    fields are set straight into their slots, as __init__ would, with their defaults."""
    build = _BUILDERS.get(cls)
    if build is not None:
        return build
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    slots = _slots(cls, fields)
    if slots is None:
        build = _BUILDERS[cls] = lambda kw: cls(**kw)
        return build
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = []
    for i, (f, slot) in enumerate(zip(fields, slots)):
        env[f"_s{i}"] = slot.__set__
        if f.default is not dataclasses.MISSING:
            env[f"_d{i}"] = f.default
            lines.append(f"        _s{i}(o, kw.get({f.name!r}, _d{i}))")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f{i}"] = f.default_factory
            lines.append(f"        _s{i}(o, kw[{f.name!r}] if {f.name!r} in kw else _f{i}())")
        else:
            lines.append(f"        _s{i}(o, kw[{f.name!r}])")
    src = ("def build(kw):\n    o = _new(_cls)\n    try:\n" + "\n".join(lines) +
           "\n    except KeyError as e:\n"
           f"        raise TypeError(f'{cls.__name__} needs {{e}}') from None\n    return o\n")
    exec(src, env)  # as dataclasses writes __init__
    build = _BUILDERS[cls] = env["build"]
    return build  # type: ignore[no-any-return]  # made by exec: its type is what the source says


_MAKERS: dict[type, Callable[[Mapping[str, Any]], Any]] = {}


def build(cls: type[T], fields: Mapping[str, Any]) -> T:
    """`cls(**fields)` for a frozen slotted dataclass of the model, three times as fast where
    many fields are given (a DeviceSample's 69: 10 µs against 31), as a source builds one per
    GPU every tick. Like __init__ it refuses a key that is not a field, and needs the fields
    without a default."""
    make = _MAKERS.get(cls)
    if make is None:
        make = _MAKERS[cls] = _strict(cls)
    return make(fields)  # type: ignore[no-any-return]


def _strict(cls: type[T]) -> Callable[[Mapping[str, Any]], T]:
    build_any = _builder(cls)
    known = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def make(fields: Mapping[str, Any]) -> T:
        if not known.issuperset(fields):
            raise TypeError(f"{cls.__name__} has no field "
                            f"{', '.join(sorted(set(fields) - known))}")
        return build_any(fields)

    return make


def _slots(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> list[Any] | None:
    """The slot of each field, where a frozen object of `cls` may be built slot by slot as its
    __init__ would build it; None where it may not (a __post_init__, a field outside __init__,
    a class without slots)."""
    slots = [getattr(cls, f.name, None) for f in fields]
    if (hasattr(cls, "__post_init__") or any(not f.init for f in fields)
            or not all(isinstance(x, types.MemberDescriptorType) for x in slots)):
        return None
    return slots


def from_dict(cls: type[T], d: Mapping[str, Any], decoded: Mapping[str, Any] | None = None) -> T:
    """`cls` from its JSON shape; `decoded` holds fields the caller has already built."""
    plan = _plan(cls)
    if (_FLAT[cls] is not None and not decoded and "unavailable" not in d
            and None not in d.values() and list not in map(type, d.values())):
        return _builder(cls)(d)  # the common case, a NVLink link a tick: values as they are
    kwargs: dict[str, Any] = dict(decoded) if decoded else {}
    _decode(plan, d, kwargs)
    return _builder(cls)(kwargs)


def from_dict_over(old: T, d: Mapping[str, Any]) -> T:
    """`old` with the fields that the keys of `d` name decoded anew from them: what `from_dict`
    makes of a JSON shape that differs from old's only in the values of those keys (none added
    or dropped, "unavailable" the same and naming none of them)."""
    kwargs: dict[str, Any] = {}
    _decode(_plan(type(old)), d, kwargs)
    return replace(old, **kwargs)


def _decode(plan: dict[str, tuple[int, Any]], d: Mapping[str, Any],
            kwargs: dict[str, Any]) -> None:
    """Puts into `kwargs` the fields that JSON shape `d` gives."""
    for name, v in d.items():
        how = plan.get(name)
        if how is None:
            continue  # a key this version does not know
        kind = how[0]
        if v is None:
            if kind == _MEASURED:
                kwargs[name] = Missing("error", detail="null without a reason")
            else:
                kwargs[name] = None
        elif kind <= _MEASURED:  # a value as it is
            kwargs[name] = tuple(v) if type(v) is list else v
        elif kind == _NESTED:
            sub = how[1]
            if isinstance(v, list):
                kwargs[name] = tuple([from_dict(sub, x) for x in v])
            else:
                kwargs[name] = from_dict(sub, v)
        elif kind == _LOST:
            kwargs[name] = _missing(v)
        else:
            kwargs[name] = _unplain(name, v)
    unavailable = d.get("unavailable")
    if unavailable:
        if not isinstance(unavailable, Mapping):
            raise TypeError(f"'unavailable' is a {type(unavailable).__name__}, not an object")
        for name, m in unavailable.items():
            if name in plan:
                kwargs[name] = _missing(m)


_REPLACERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def replace(obj: T, **changes: Any) -> T:
    """`dataclasses.replace` for the model's frozen dataclasses, slot by slot as `_builder`
    builds them: 2 µs for a NVLink link where dataclasses.replace takes 7, and a source replaces
    every link's rates every slow tick."""
    cls = type(obj)
    rep = _REPLACERS.get(cls)
    if rep is None:
        rep = _REPLACERS[cls] = _replacer(cls)
    out: T = rep(obj, changes)
    return out


def _replacer(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    fields = dataclasses.fields(cls)
    slots = _slots(cls, fields)
    if slots is None:
        return lambda obj, changes: dataclasses.replace(obj, **changes)
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls,
                           "_known": frozenset(f.name for f in fields)}
    lines = []
    for i, (f, slot) in enumerate(zip(fields, slots)):
        env[f"_s{i}"] = slot.__set__
        lines.append(f"    _s{i}(o, ch[{f.name!r}] if {f.name!r} in ch else obj.{f.name})")
    src = ("def rep(obj, ch):\n"
           "    if ch and not _known.issuperset(ch):\n"
           f"        raise TypeError(f'{cls.__name__} has no field "
           "{\", \".join(sorted(set(ch) - _known))}')\n"
           "    o = _new(_cls)\n" + "\n".join(lines) + "\n    return o\n")
    exec(src, env)  # as `_builder`
    rep: Callable[[Any, dict[str, Any]], Any] = env["rep"]
    return rep


def mark_all(obj: T, missing: Missing, names: Iterable[str] | None = None) -> T:
    """A copy of `obj` with every measured field (or those named) set to `missing`."""
    fields = tuple(names) if names is not None else obj._measured  # type: ignore[attr-defined]
    return dataclasses.replace(obj, **{n: missing for n in fields})  # type: ignore[type-var]


EMPTY_HOST = HostSample()
__all__ = [
    "PENDING",
    "PROBE_STALE_AFTER_S",
    "REASONS",
    "SCHEMA",
    "UNSUPPORTED",
    "ChildProcess",
    "DeviceSample",
    "HostSample",
    "JobInfo",
    "LinkSample",
    "MigDevice",
    "Missing",
    "ProbeStats",
    "ProcessSample",
    "Snapshot",
    "SystemInfo",
    "Topology",
    "Val",
    "XidEvent",
    "present",
    "value",
]
