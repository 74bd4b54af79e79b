"""NVIDIA GPUs through NVML, with NVIDIA's own binding (`nvidia-ml-py`, module `pynvml`).

Every NVML call goes through `_Device.ask`, which turns NVML's errors into gputop's `Missing`
reasons once, here. A metric that answers NotSupported or NoPermission is not asked again. A GPU
that answers GpuIsLost is marked lost and not polled again; the others keep updating.

Cadence (costs measured on an H100, docs/diagnostics.md §0.11):
- once at open: names, ids, thresholds, PCIe max link, topology matrix (~10 ms a pair); max
  clocks with the first slow tick;
- every tick (~0.1 ms a GPU): utilization, memory, power, clocks, temperature, reasons, P-state,
  fan, running processes;
- every `slow_interval` (5 s): field values (throttle-time counters, HBM temperature, energy,
  NVLink traffic), GPM (SM active, tensor, DRAM, PCIe traffic), process utilization, thermal
  margin, encoder/decoder;
- every `state_interval` (STATE_EVERY_S, 15 s: Prometheus' default scrape interval), never older,
  what changes rarely: NVLink state and error counters (five calls a link: 720 on an 8-GPU
  NVSwitch node), MIG mode (0.1 ms a GPU; it changes only with a GPU reset), power limit,
  persistence, PCIe link and replays, ECC counts, retired pages, remapped rows (19 calls a GPU);
- every PCIE_THROUGHPUT_EVERY_S (15 s), only where GPM cannot give PCIe traffic:
  `nvmlDeviceGetPcieThroughput`, a 20 ms sample of the traffic that blocks for those 20 ms and
  costs 0.65 ms of CPU a call (H100, driver 580), two a GPU. The GPUs are sampled at once.

A one-shot's table (`brief`: gputop --once, ui.view.table) reads only what it shows: each GPU's
use, memory, temperature, power and power limit, clocks, throttle reasons, MIG mode and GPM, and
its processes with their use; no max clocks, thresholds, PCIe link or throughput, ECC,
encoder/decoder, field values, NVLink links or topology. On an 8x H100 node with driver 580 a
one-shot then makes about 200 calls instead of 2,000 (most of them NVLink's), and spends 37 ms
of CPU in the driver instead of 84 (max clocks alone take 20 ms).

Xid events: every GPU that offers them is registered in one event set, and each poll takes what
has arrived since the last one (`nvmlEventSetWait_v2` with no wait, until it says Timeout): no
thread waits for them. Xid 79 marks the GPU lost.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputop.errors import BackendUnavailable, DriverMismatch
from gputop.model import (
    PENDING,
    UNSUPPORTED,
    DeviceSample,
    LinkSample,
    MigDevice,
    Missing,
    ProcessSample,
    Topology,
    XidEvent,
    build,
    mark_all,
    replace,
)
from gputop.model.reasons import REASON_BITS
from gputop.sources.base import GpuTick, SourceInfo, held, keep_equal

# The DeviceSample fields each poll reads anew (the others are the static and slow ticks' own
# objects until those read them again).
_FAST_FIELDS = ("util_gpu", "util_mem", "mem_total", "mem_used", "mem_reserved", "mem_free",
                "temp_gpu", "power_draw", "clock_sm", "clock_mem", "pstate", "fan", "throttle",
                "temp_margin", "xid_count", "xids")

# Cumulative nanosecond counters per reason (field values 74, 76, 269-271).
REASON_COUNTERS = {
    "sw_power_cap": 74,
    "sync_boost": 76,
    "sw_thermal": 269,
    "hw_thermal": 270,
    "hw_power_brake": 271,
}
FI_MEMORY_TEMP = 82
FI_TOTAL_ENERGY = 83  # mJ since the driver loaded: nvmlDeviceGetTotalEnergyConsumption's figure
FI_NVLINK_DATA_TX = 138  # cumulative KiB; scopeId = link
FI_NVLINK_DATA_RX = 139
GPM_METRICS = {  # NVML_GPM_METRIC_* -> DeviceSample field
    1: "gr_active",
    2: "sm_active",
    3: "sm_occupancy",
    5: "tensor_active",
    10: "dram_active",
    20: "pcie_tx",  # MiB/s
    21: "pcie_rx",
}
PCIE_THROUGHPUT_EVERY_S = 15.0
STATE_EVERY_S = 15.0  # NVLink state and error counters, MIG mode: they change rarely
GPM_MIN_INTERVAL = 0.1  # s between the two samples of a GPM metric (nvml.h)
TOPOLOGY_LABELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
NVLINK_REMOTE = {0: "gpu", 1: "cpu", 2: "switch"}
NVLINK_ERRORS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
_NVLINK_ERROR_METRICS = tuple((name, c, f"nvlink_err{name}") for name, c in NVLINK_ERRORS.items())
MIG_INSTANCE_NONE = 0xFFFFFFFF
MIB = 1 << 20
EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError: the event's data is the Xid number
# Xid events taken by one poll at most; a storm's others wait for the next polls.
XID_TAKE_MAX = 64
XID_GPU_LOST = 79  # "GPU has fallen off the bus"
# A Snapshot lists a GPU's Xids of the last hour, at most XID_RECENT_MAX of them, and always
# its latest (the last Xid, as DCGM keeps it); `xid_count` counts them all.
XID_RECENT_S = 3600.0
XID_RECENT_MAX = 16

# NVML return codes (nvml.h); the binding maps them to NVMLError subclasses.
ERR_UNINITIALIZED = 1
ERR_INVALID_ARGUMENT = 2
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_NOT_FOUND = 6
ERR_INSUFFICIENT_SIZE = 7
ERR_DRIVER_NOT_LOADED = 9
ERR_TIMEOUT = 10
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_LIB_RM_VERSION_MISMATCH = 18

_UNSUPPORTED_CODES = {ERR_NOT_SUPPORTED, ERR_INVALID_ARGUMENT, ERR_FUNCTION_NOT_FOUND}


try:  # raised by the binding's unversioned wrappers when the driver lacks the call
    from pynvml import NVMLLibraryMismatchError as _MISMATCH
    _MISMATCH_ERRORS: tuple[type[BaseException], ...] = (_MISMATCH,)
except ImportError:
    _MISMATCH_ERRORS = ()


_WARNINGS_LOCK = threading.Lock()


class _Lost(Exception):
    """Raised inside a device's poll when NVML says the GPU fell off the bus."""


@dataclass
class _Device:
    index: int
    handle: Any
    nvml: Any
    name: str = ""
    uuid: str = ""
    bus_id: str = ""
    static: dict[str, Any] = field(default_factory=dict)  # DeviceSample fields read once
    slow: dict[str, Any] = field(default_factory=dict)  # DeviceSample fields of the slow tick
    off: dict[str, Missing] = field(default_factory=dict)  # metrics not to ask again
    lost: Missing | None = None
    links: list[LinkSample] = field(default_factory=list)
    link_ids: list[int] = field(default_factory=list)
    field_ids: list[tuple[int, int]] = field(default_factory=list)  # asked at each slow tick
    field_blank: dict[int, bytes] = field(default_factory=dict)  # see _field_values
    # (KiB, µs) of each NVLink counter at its last reading, in `field_ids`' order of them
    nvlink_prev: list[tuple[int, int] | None] = field(default_factory=list)
    link_rates: dict[int, dict[str, Any]] = field(default_factory=dict)  # of the last fields
    gpm_prev: Any = None
    gpm_prev_time: float = 0.0
    gpm_pcie: bool = False  # GPM gave PCIe traffic on the last slow tick
    proc_util_seen: int = 0
    # pid -> (SM %, memory %) of the last slow tick; pending until the first one has read them
    proc_util: dict[int, tuple[float, float]] | Missing = PENDING
    mig_handles: list[tuple[Any, int, int]] = field(default_factory=list)
    # see _running_processes and _processes_utilization
    proc_room: dict[str, int] = field(default_factory=dict)
    readers: dict[str, Callable[[Any], Any]] = field(default_factory=dict)  # see _reader
    fast: dict[str, Any] = field(default_factory=dict)  # the values the last poll read
    procs: dict[int, ProcessSample] | None = None  # the last poll's, by pid; None before one
    state_at: float = float("-inf")  # when its links' state and errors, MIG mode were read
    mig_mode: Any = None  # the last MIG mode read: (current, pending), or a Missing
    xid_count: int | Missing = UNSUPPORTED  # an int once Xid events are watched on this GPU
    xids: list[XidEvent] = field(default_factory=list)

    def reader(self, wrapper: str, args: tuple[Any, ...], entry: str, struct_name: str,
               value: str | None = None, **preset: int) -> Callable[[Any], Any]:
        """The binding's `wrapper(handle, *args)` as a `_reader` of this GPU, made once (the
        wrapper itself where the binding lacks what a reader needs)."""
        call = self.readers.get(entry)
        if call is None:
            call = _reader(self.nvml, entry, struct_name, value, **preset)
            if call is None:
                call = functools.partial(_call, getattr(self.nvml, wrapper), args)
            self.readers[entry] = call
        return call

    def ask(self, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Calls NVML; returns the value or a Missing. Raises _Lost when the GPU is gone."""
        if metric in self.off:
            return self.off[metric]
        try:
            return fn(*args)
        except _MISMATCH_ERRORS:
            self.off[metric] = Missing("unsupported", detail="not in this driver")
            return self.off[metric]
        except self.nvml.NVMLError as e:
            code = getattr(e, "value", None)
            if code == ERR_GPU_IS_LOST:
                raise _Lost(str(e)) from None
            if code in _UNSUPPORTED_CODES:
                self.off[metric] = Missing("unsupported")
                return self.off[metric]
            if code == ERR_NO_PERMISSION:
                self.off[metric] = Missing("no_permission")
                return self.off[metric]
            return Missing("error", detail=_err_text(e))


_NO_PERMISSION = Missing("no_permission")
_PROC_ROOM = 16  # process entries first offered to the driver per GPU and kind


def _running_processes(nvml: Any, name: str, handle: Any, room: dict[str, int]) -> list[Any]:
    """The running processes of one kind, as the binding's `name` (a `_v3` call) gives them,
    in one driver call where the binding makes two (count, then entries; see `_sized`). Falls
    back to the binding's own wrapper where it lacks what the one call needs."""
    struct = _plain(getattr(nvml, "c_nvmlProcessInfo_v3_t", None))
    pointer = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if struct is None or pointer is None:
        return list(getattr(nvml, name)(handle))
    fn = pointer(name)

    def ask(size: int) -> tuple[int, int, Any]:
        count, array = ctypes.c_uint(size), (struct * size)()
        return fn(handle, ctypes.byref(count), array), count.value, array

    entries = _sized(nvml, name, room, ask)
    na = nvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    return [_ProcessInfo(int(e.pid), None if e.usedGpuMemory == na else int(e.usedGpuMemory),
                         int(e.gpuInstanceId), int(e.computeInstanceId))
            for e in entries]


def _sized(nvml: Any, name: str, room: dict[str, int],
           ask: Callable[[int], tuple[int, int, Any]]) -> list[Any]:
    """The entries of a driver call that fills an array, in one call where the binding's wrapper
    makes two (the count, then the entries): `ask(size)` makes the call with an array of `size`
    entries and gives its return code, the count it answered and the array. The array is as
    large as the last answer of `name` needed (`room`), grown and asked again only when the
    driver says it is too small."""
    size = room.get(name, _PROC_ROOM)
    while True:
        ret, count, array = ask(size)
        if ret == ERR_INSUFFICIENT_SIZE and count > size:
            size = room[name] = count * 2 + 5  # as the binding oversizes it
            continue
        if ret != 0:
            raise nvml.NVMLError(ret)
        return list(array[:count])


@functools.cache
def _plain(struct_t: Any) -> Any:
    """The binding's struct as a plain ctypes one, laid out alike: the binding's reads each
    field through an attribute hook in Python (4 a process, every tick, on every GPU), a plain
    struct through ctypes itself. The binding's own where it is not a ctypes struct."""
    fields = getattr(struct_t, "_fields_", None)
    if not isinstance(struct_t, type) or not issubclass(struct_t, ctypes.Structure) or not fields:
        return struct_t
    body: dict[str, Any] = {"_fields_": list(fields)}
    if "_pack_" in vars(struct_t):
        body["_pack_"] = struct_t._pack_
    plain = type(f"{struct_t.__name__}_plain", (ctypes.Structure,), body)
    if ctypes.sizeof(plain) != ctypes.sizeof(struct_t) or any(
            getattr(plain, f[0]).offset != getattr(struct_t, f[0]).offset for f in fields):
        return struct_t
    return plain


def _call(fn: Callable[..., Any], args: tuple[Any, ...], handle: Any) -> Any:
    return fn(handle, *args)


def _reader(nvml: Any, entry: str, struct_name: str, value: str | None = None, **preset: int
            ) -> Callable[[Any], Any] | None:
    """A call of NVML's `entry(handle, struct *)` as the binding's wrapper makes it, into one plain
    copy of the binding's `struct_name` (see `_plain`) made here with the `preset` fields set,
    and returned by every call: read it before the next. The wrapper builds the binding's struct
    at each call and reads each field through its attribute hooks; this costs a third of that,
    every tick on every GPU. With `value`, the call returns that field of it, as the wrapper of
    a call that gives one number does. None where the binding lacks what it needs."""
    struct_t = _plain(getattr(nvml, struct_name, None))
    pointer = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if pointer is None or not isinstance(struct_t, type) or not issubclass(struct_t,
                                                                            ctypes.Structure):
        return None
    box = struct_t(**preset)
    ref = ctypes.byref(box)

    def call(handle: Any) -> Any:
        ret = pointer(entry)(handle, ref)  # the binding's cache of the library's entry points
        if ret != 0:
            raise nvml.NVMLError(ret)
        return box if value is None else getattr(box, value)

    return call


def _processes_utilization(nvml: Any, handle: Any, last_seen: int,
                           room: dict[str, int]) -> list[Any]:
    """Each process's utilization samples since `last_seen` (µs), as the binding's
    nvmlDeviceGetProcessesUtilizationInfo gives them, in one driver call where the binding makes
    two (see `_sized`). On an H100 with driver 580 the samples cost about 2.3 ms of CPU a call,
    as the older call below does, and asking the count alone little: the one call saves the
    binding's work, not the driver's (fixtures/nvidia/h100-train/process-use-calls.txt). The
    binding's wrapper where the binding lacks what the one call needs."""
    name = "nvmlDeviceGetProcessesUtilizationInfo"
    info_t = getattr(nvml, "c_nvmlProcessesUtilizationInfo_v1_t", None)
    sample_t = _plain(getattr(nvml, "c_nvmlProcessUtilizationInfo_v1_t", None))
    version = getattr(nvml, "ProcessesUtilizationInfo_v1", None)
    pointer = getattr(nvml, "_nvmlGetFunctionPointer", None)
    array_t = dict(getattr(info_t, "_fields_", ())).get("procUtilArray")
    if info_t is None or sample_t is None or version is None or pointer is None or not array_t:
        return list(getattr(nvml, name)(handle, last_seen))
    fn = pointer(name)

    def ask(size: int) -> tuple[int, int, Any]:
        array = (sample_t * size)()
        info = info_t(version=version, processSamplesCount=size, lastSeenTimeStamp=last_seen,
                      procUtilArray=ctypes.cast(array, array_t))
        return fn(handle, ctypes.byref(info)), info.processSamplesCount, array

    return _sized(nvml, name, room, ask)


def _process_utilization(nvml: Any, handle: Any, last_seen: int,
                         room: dict[str, int]) -> list[Any]:
    """The same from nvmlDeviceGetProcessUtilization, the call of drivers before 550, in one
    driver call where the binding makes two."""
    name = "nvmlDeviceGetProcessUtilization"
    sample_t = _plain(getattr(nvml, "c_nvmlProcessUtilizationSample_t", None))
    pointer = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if pointer is None or not isinstance(sample_t, type) or not issubclass(sample_t,
                                                                            ctypes.Structure):
        return list(getattr(nvml, name)(handle, last_seen))
    fn = pointer(name)

    def ask(size: int) -> tuple[int, int, Any]:
        count, array = ctypes.c_uint(size), (sample_t * size)()
        ret = fn(handle, array, ctypes.byref(count), ctypes.c_ulonglong(last_seen))
        return ret, count.value, array

    return _sized(nvml, name, room, ask)


@dataclass(frozen=True)
class _ProcessInfo:
    """One entry of a running-process list, with the binding's field names."""
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


def _sram_threshold(nvml: Any, handle: Any) -> bool:
    """Whether the GPU's uncorrected SRAM errors passed the threshold past which it should be
    replaced (nvmlDeviceGetSramEccErrorStatus, from driver 570)."""
    factory = getattr(nvml, "c_nvmlEccSramErrorStatus_v1_t", None)
    if factory is None:  # a binding older than the call
        raise nvml.NVMLError(ERR_FUNCTION_NOT_FOUND)
    status = factory()
    nvml.nvmlDeviceGetSramEccErrorStatus(handle, ctypes.byref(status))
    return bool(status.bThresholdExceeded)


def _address(handle: Any) -> int:
    """The address a ctypes handle points to: how an event names its device."""
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def _fell_off(dev: _Device, why: str) -> str:
    return (f"GPU {dev.index} ({dev.name}, {dev.bus_id}) fell off the bus: {why}; "
            "the other GPUs keep updating")


def _err_text(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:  # pynvml's __str__ calls into the library, which may be gone
        return f"NVML error {getattr(e, 'value', '?')}"


def _ok(v: Any) -> bool:
    return not isinstance(v, Missing)


def _map(v: Any, f: Callable[[Any], Any]) -> Any:
    return f(v) if _ok(v) else v


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _cpu_list(masks: Any) -> str:
    """NVML's CPU affinity bitmask words -> "0-51,104-155"."""
    cpus = [w * 64 + b for w, word in enumerate(masks) for b in range(64) if int(word) >> b & 1]
    ranges: list[str] = []
    start = prev = None
    for c in [*cpus, None]:
        if start is None:
            start = prev = c
        elif c is not None and prev is not None and c == prev + 1:
            prev = c
        else:
            ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = c
    return ",".join(ranges)


def open_error(e: Exception) -> BackendUnavailable:
    """The one-line message for an nvmlInit failure, saying what to do."""
    code = getattr(e, "value", None)
    if code == ERR_LIBRARY_NOT_FOUND:
        return BackendUnavailable(
            "NVIDIA driver library (libnvidia-ml.so.1) not found",
            hint="install the NVIDIA driver, or run the container with GPU access (--gpus all)")
    if code == ERR_DRIVER_NOT_LOADED:
        return BackendUnavailable(
            "NVIDIA driver is not loaded",
            hint="load it (sudo modprobe nvidia) and check `dmesg` for why it did not load",
            priority=1)
    if code == ERR_NO_PERMISSION:
        return BackendUnavailable(
            "no permission to open the NVIDIA devices (/dev/nvidia*)",
            hint="add your user to the group that owns them (often 'video'), or ask an admin",
            priority=1)
    if code == ERR_LIB_RM_VERSION_MISMATCH:
        return DriverMismatch(
            "NVIDIA driver/library version mismatch",
            hint="the driver was upgraded without a reboot: reboot, or reload the nvidia kernel "
                 "modules",
            priority=2)
    return BackendUnavailable(f"NVML failed to start ({_err_text(e)})", priority=1)


class NvmlSource:
    name = "nvml"

    def __init__(self, lib: Any = None, *, slow_interval: float = 5.0,
                 pcie_throughput: bool = True, background: bool = False,
                 state_interval: float = STATE_EVERY_S, brief: bool = False) -> None:
        self._lib = lib
        self.nvml: Any = None
        self.slow_interval = slow_interval
        # Brief: only what a one-shot's table shows (above); what it leaves unread is pending.
        self.brief = brief
        self.pcie_throughput = pcie_throughput and not brief
        # What changes rarely (NVLink state and error counters, MIG mode, limits, the PCIe
        # link, ECC counts...) is read when it would turn `state_interval` s old (at least every
        # slow tick). NVLink rates follow every slow tick.
        self.state_interval = state_interval
        # In the background, a poll never waits for the slow calls: it starts them in a thread
        # when they are due and shows what the last slow tick read (the first poll has the
        # fast fields only; the slow ones follow a tick later).
        self.background = background
        self._slow_thread: threading.Thread | None = None
        self._primed: threading.Thread | None = None
        self._last_pcie = float("-inf")
        self._slow_warnings: list[str] = []
        self.devices: list[_Device] = []
        self.topology: Topology | None = None
        self._last_slow = float("-inf")
        self._open = False
        self._xid_set: Any = None  # the event set Xid events arrive on; None when none do
        self._xid_devices: dict[int, int] = {}  # handle address -> device index

    # ------------------------------------------------------------------------------------------
    # open / close

    def open(self) -> SourceInfo:
        nvml = self._lib
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore[no-redef]  # the binding, or a fake given
            except ImportError:
                raise BackendUnavailable(
                    "nvidia-ml-py is not installed", hint="pip install nvidia-ml-py") from None
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise open_error(e) from None
        self._open = True
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as e:
            self.close()
            raise open_error(e) from None
        if count == 0:
            self.close()
            raise BackendUnavailable("no NVIDIA GPU found",
                                     hint="the driver is loaded but lists no device", priority=1)
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
            except nvml.NVMLError as e:
                # A GPU can be lost before we start; show it as lost rather than hide it.
                dev = _Device(i, None, nvml, name="(unavailable)")
                dev.lost = Missing("gpu_lost", detail=_err_text(e))
                self.devices.append(dev)
                continue
            dev = _Device(i, handle, nvml)
            try:
                self._read_static(dev)
            except _Lost as e:
                dev.lost = Missing("gpu_lost", detail=str(e))
            self.devices.append(dev)
        self.topology = None if self.brief else self._read_topology()
        self._watch_xids()
        return self._info()

    def _info(self) -> SourceInfo:
        nvml = self.nvml
        info = SourceInfo(backend="nvml")
        try:
            info.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            pass
        try:
            v = nvml.nvmlSystemGetCudaDriverVersion_v2()
            info.cuda_version = f"{v // 1000}.{v % 1000 // 10}"
        except nvml.NVMLError:
            pass
        try:
            info.nvml_version = _text(nvml.nvmlSystemGetNVMLVersion())
        except nvml.NVMLError:
            pass
        return info

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for thread in (self._slow_thread, self._primed):
            if thread is not None and thread.ident is not None:
                thread.join(5.0)
        self._slow_thread = self._primed = None
        self._stop_xids()
        for dev in self.devices:
            if dev.gpm_prev is not None:
                self._quietly(self.nvml.nvmlGpmSampleFree, dev.gpm_prev)
                dev.gpm_prev = None
        self._quietly(self.nvml.nvmlShutdown)

    def _quietly(self, fn: Callable[..., Any], *args: Any) -> None:
        """An NVML call whose failure changes nothing (freeing, shutting down)."""
        try:
            fn(*args)
        except self.nvml.NVMLError:
            pass

    # ------------------------------------------------------------------------------------------
    # Xid events

    def _watch_xids(self) -> None:
        """Registers every GPU that offers Xid events in one event set, which each poll reads.
        A GPU (or driver) that answers NotSupported has no events; nothing else changes."""
        n = self.nvml
        try:
            event_set = n.nvmlEventSetCreate()
        except n.NVMLError as e:
            for dev in self.devices:
                dev.xid_count = _xid_missing(e)
            return
        watched: dict[int, int] = {}
        for dev in self.devices:
            if dev.lost is not None:
                continue
            try:
                if not n.nvmlDeviceGetSupportedEventTypes(dev.handle) & EVENT_XID:
                    dev.xid_count = Missing("unsupported", detail="no Xid events on this GPU")
                    continue
                n.nvmlDeviceRegisterEvents(dev.handle, EVENT_XID, event_set)
            except n.NVMLError as e:
                dev.xid_count = _xid_missing(e)
                continue
            dev.xid_count = 0
            watched[_address(dev.handle)] = dev.index
        self._xid_set, self._xid_devices = event_set, watched
        if not watched:
            self._stop_xids()

    def _stop_xids(self) -> None:
        if self._xid_set is not None:
            self._quietly(self.nvml.nvmlEventSetFree, self._xid_set)
            self._xid_set = None

    def _received_xids(self) -> tuple[list[tuple[int, int]], str | None]:
        """The (device index, Xid) events that arrived since the last call, and why watching
        stopped, if it did: an error other than the Timeout that means "no more events"."""
        n = self.nvml
        events: list[tuple[int, int]] = []
        for _ in range(XID_TAKE_MAX):
            try:
                data = n.nvmlEventSetWait_v2(self._xid_set, 0)
            except n.NVMLError as e:
                if getattr(e, "value", None) == ERR_TIMEOUT:
                    break
                self._stop_xids()
                return events, f"Xid events are no longer watched: {_err_text(e)}"
            index = self._xid_devices.get(_address(data.device))
            if int(data.eventType) & EVENT_XID and index is not None:
                events.append((index, int(data.eventData)))
        return events, None

    def _take_xids(self, now: float, tick: GpuTick) -> None:
        """Adds the Xid events that arrived since the last poll to their GPUs, dated at this
        poll."""
        if self._xid_set is not None:
            events, note = self._received_xids()
            if note:
                tick.warnings.append(note)
            for index, xid in events:
                dev = self.devices[index]
                dev.xid_count = (dev.xid_count if isinstance(dev.xid_count, int) else 0) + 1
                dev.xids.append(XidEvent(xid=xid, time=now))
                if xid == XID_GPU_LOST and dev.lost is None:
                    dev.lost = Missing("gpu_lost", since=now, detail="Xid 79")
                    tick.warnings.append(_fell_off(dev, "Xid 79"))
        for dev in self.devices:
            if len(dev.xids) > 1 and (len(dev.xids) > XID_RECENT_MAX
                                      or dev.xids[0].time <= now - XID_RECENT_S):
                recent = [x for x in dev.xids if x.time > now - XID_RECENT_S]
                dev.xids = recent[-XID_RECENT_MAX:] or dev.xids[-1:]

    # ------------------------------------------------------------------------------------------
    # static facts

    def _read_static(self, dev: _Device) -> None:
        n, h = self.nvml, dev.handle
        dev.name = _map(dev.ask("name", n.nvmlDeviceGetName, h), _text)
        if not _ok(dev.name):
            dev.name = "NVIDIA GPU"
        uuid = dev.ask("uuid", n.nvmlDeviceGetUUID, h)
        dev.uuid = _text(uuid) if _ok(uuid) else ""
        pci = dev.ask("pci", n.nvmlDeviceGetPciInfo, h)
        dev.bus_id = _text(pci.busId) if _ok(pci) else ""
        if self.brief:
            return  # none of the rest shows in a one-shot's table
        s = dev.static
        for key, which in (("temp_shutdown", 0), ("temp_slowdown", 1), ("temp_max_operating", 3)):
            s[key] = _map(dev.ask(key, n.nvmlDeviceGetTemperatureThreshold, h, which), float)
        s["power_default_limit"] = _map(
            dev.ask("power_default_limit", n.nvmlDeviceGetPowerManagementDefaultLimit, h),
            lambda mw: round(mw / 1000, 2))
        s["compute_capability"] = _map(
            dev.ask("compute_capability", n.nvmlDeviceGetCudaComputeCapability, h),
            lambda cc: f"{cc[0]}.{cc[1]}")
        s["pcie_gen_max"] = dev.ask("pcie_gen_max", n.nvmlDeviceGetMaxPcieLinkGeneration, h)
        s["pcie_width_max"] = dev.ask("pcie_width_max", n.nvmlDeviceGetMaxPcieLinkWidth, h)
        s["ecc_enabled"] = _map(dev.ask("ecc_mode", n.nvmlDeviceGetEccMode, h),
                                lambda m: bool(m[0]))
        s["numa_node"] = dev.ask("numa_node", n.nvmlDeviceGetNumaNodeId, h)
        words = max(1, ((os.cpu_count() or 1) + 63) // 64)
        s["cpu_affinity"] = _map(dev.ask("cpu_affinity", n.nvmlDeviceGetCpuAffinity, h, words),
                                 _cpu_list)
        self._read_links(dev)

    def _read_links(self, dev: _Device) -> None:
        n, h = self.nvml, dev.handle
        max_links = int(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))
        for link in range(max_links):
            try:
                state = n.nvmlDeviceGetNvLinkState(h, link)
            except n.NVMLError as e:
                if getattr(e, "value", None) == ERR_GPU_IS_LOST:
                    raise _Lost(_err_text(e)) from None
                continue  # this link does not exist on this GPU (NotSupported/InvalidArgument)
            dev.link_ids.append(link)
            version = dev.ask(f"nvlink_version{link}", n.nvmlDeviceGetNvLinkVersion, h, link)
            remote = dev.ask(f"nvlink_remote{link}", n.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            rtype = dev.ask(f"nvlink_rtype{link}", n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
            dev.links.append(LinkSample(
                device_index=dev.index, link=link, kind="nvlink",
                up=bool(state),
                version=_map(version, lambda v: NVLINK_VERSIONS.get(v, str(v))),
                remote_bus_id=_map(remote, lambda p: _text(p.busId)),
                remote_kind=_map(rtype, lambda t: NVLINK_REMOTE.get(t, "unknown")),
            ))

    def _read_topology(self) -> Topology | None:
        devs = [d for d in self.devices if d.lost is None]
        if not devs:
            return None
        by_bus = {d.bus_id.lower(): d.index for d in devs}
        rows: list[tuple[str, ...]] = []
        for a in devs:
            row = []
            for b in devs:
                row.append("X" if a is b else self._pair_label(a, b, by_bus))
            rows.append(tuple(row))
        cpu = tuple(_or_blank(d.static.get("cpu_affinity")) for d in devs)
        numa = tuple(_or_blank(d.static.get("numa_node")) for d in devs)
        return Topology(matrix=tuple(rows), cpu_affinity=cpu, numa_affinity=numa)

    def _pair_label(self, a: _Device, b: _Device, by_bus: dict[str, int]) -> str:
        up_links = [lk for lk in a.links if lk.up is True]
        direct = sum(1 for lk in up_links if _ok(lk.remote_bus_id)
                     and by_bus.get(str(lk.remote_bus_id).lower()) == b.index)
        if direct:
            return f"NV{direct}"
        switched = [lk for lk in up_links if lk.remote_kind == "switch"]
        if switched:
            try:  # through NVSwitch: the pair talks over NVLink if P2P says so
                if self.nvml.nvmlDeviceGetP2PStatus(a.handle, b.handle, 2) == 0:
                    return f"NV{len(switched)}"
            except self.nvml.NVMLError:
                pass
        try:
            level = self.nvml.nvmlDeviceGetTopologyCommonAncestor(a.handle, b.handle)
        except self.nvml.NVMLError:
            return "?"
        return TOPOLOGY_LABELS.get(level, "?")

    # ------------------------------------------------------------------------------------------
    # polling

    def prime(self, now: float) -> float:
        """Takes the first reading of the counters whose rates need two (NVLink traffic, GPM),
        so that the next poll has their rates without waiting a slow interval (--once), and
        starts the rest of the first slow tick in a thread: it runs while the caller waits. The
        poll then reads the counters again and takes the rest. Returns the time from which that
        poll has every rate: GPM wants its samples 100 ms apart. Lists the GPU processes in
        `primed_processes`."""
        ready = now
        self.primed_processes: list[ProcessSample] = []  # whose host counters to read too
        for dev in self.devices:
            if dev.lost is None:
                try:
                    self._read_fields(dev, dict(dev.slow), now)
                    self._read_gpm(dev, dict(dev.slow), now)
                    self.primed_processes += self._processes(dev)
                except _Lost as e:
                    dev.lost = Missing("gpu_lost", since=now, detail=str(e))
                if dev.gpm_prev is not None:
                    ready = now + GPM_MIN_INTERVAL
        self._last_slow = now
        self._primed = threading.Thread(target=self._slow_tick, args=(now, False), daemon=True,
                                        name="gputop-nvml-slow")
        self._primed.start()
        # The first call of each NVML entry point after nvmlInit costs up to 2.5 ms (H100,
        # driver 580; 15 ms for a tick's calls): made here, on one GPU, it is paid while the
        # caller waits for its rates, not by the poll it waits for.
        live = [dev for dev in self.devices if dev.lost is None]
        if live:
            try:
                self._poll_fast(live[0], now)
            except _Lost as e:
                live[0].lost = Missing("gpu_lost", since=now, detail=str(e))
        return ready

    def poll(self, now: float) -> GpuTick:
        tick = GpuTick(topology=self.topology)
        self._take_xids(now, tick)
        if self._primed is not None:  # the rest of the slow tick prime() started
            self._primed.join()
            self._primed = None
            self._read_counters(now)
        slow = now - self._last_slow >= self.slow_interval
        if slow and not self.background:
            self._last_slow = now
            self._slow_tick(now)
        tick.warnings += self._take_slow_warnings()
        if slow and self.background and (self._slow_thread is None
                                         or not self._slow_thread.is_alive()):
            # Started after this poll's own calls (below) are made: it would slow them down.
            self._last_slow = now
            self._slow_thread = threading.Thread(target=self._slow_tick, args=(now,),
                                                 name="gputop-nvml-slow", daemon=True)
        for dev in self.devices:
            if dev.lost is None:
                try:
                    sample, procs = self._poll_fast(dev, now)
                except _Lost as e:
                    dev.lost = Missing("gpu_lost", since=now, detail=str(e))
                    tick.warnings.append(_fell_off(dev, str(e)))
                else:
                    tick.devices.append(sample)
                    tick.processes += procs
                    tick.links += dev.links
                    continue
            tick.devices.append(self._lost_sample(dev))
        if slow and self._slow_thread is not None and self._slow_thread.ident is None:
            self._slow_thread.start()
        return tick

    def _read_counters(self, now: float) -> None:
        """The field values and GPM of every GPU, and the NVLink rates from them."""
        for dev in self.devices:
            if dev.lost is not None:
                continue
            try:
                s = dict(dev.slow)
                self._read_fields(dev, s, now)
                self._read_gpm(dev, s, now)
            except _Lost as e:
                self._lose(dev, now, str(e))
                continue
            keep_equal(s, dev.slow)  # what held still: last tick's objects
            dev.slow = s
            _follow_rates(dev)

    def _slow_tick(self, now: float, counters: bool = True) -> None:
        """Every GPU's slow fields (without the counters of `_read_counters` if not `counters`).
        The blocking PCIe throughput calls (20 ms each) run for all GPUs at once, each GPU in a
        thread of its own: they wait, they do not compute."""
        due = not 0 <= now - self._last_pcie < max(self.slow_interval, PCIE_THROUGHPUT_EVERY_S)
        if due:
            self._last_pcie = now
        ahead = None
        if not counters and due and self.pcie_throughput:
            # The first slow tick (prime read GPM already, so the GPUs without GPM's PCIe
            # traffic are known): their 20 ms samples are taken while the rest is read.
            ahead = self._sample_pcie([d for d in self.devices
                                       if d.lost is None and not d.gpm_pcie], now)
        pcie = []
        for dev in self.devices:
            if dev.lost is not None:
                continue
            try:
                self._poll_slow(dev, now, counters)
            except _Lost as e:
                self._lose(dev, now, str(e))
                continue
            if not dev.gpm_pcie and self.pcie_throughput:
                pcie.append(dev)
        if ahead is not None:
            ahead()
        elif due and pcie:
            self._sample_pcie(pcie, now)()

    def _sample_pcie(self, devs: list[_Device], now: float) -> Callable[[], None]:
        """Starts the PCIe throughput samples of `devs`, a thread a GPU; the function returned
        waits for them and adds them to each GPU's slow fields."""
        got: dict[int, dict[str, Any]] = {}
        threads = [threading.Thread(target=self._read_pcie, args=(dev, now, got), daemon=True,
                                    name="gputop-nvml-pcie") for dev in devs]
        for t in threads:
            t.start()

        def finish() -> None:
            for t in threads:
                t.join()
            for dev in devs:
                if dev.index in got and dev.lost is None:
                    dev.slow = {**dev.slow, **got[dev.index]}

        return finish

    def _read_pcie(self, dev: _Device, now: float, into: dict[int, dict[str, Any]]) -> None:
        n, h = self.nvml, dev.handle
        got = {}
        try:
            for key, counter in (("pcie_tx", 0), ("pcie_rx", 1)):
                got[key] = _map(dev.ask(f"pcie_tp{counter}", n.nvmlDeviceGetPcieThroughput, h,
                                        counter), lambda kb: float(kb) * 1024)
        except _Lost as e:
            self._lose(dev, now, str(e))
            return
        into[dev.index] = got

    def _lose(self, dev: _Device, now: float, why: str) -> None:
        """Marks a GPU lost outside a poll; the next poll says so."""
        if dev.lost is None:
            dev.lost = Missing("gpu_lost", since=now, detail=why)
            with _WARNINGS_LOCK:
                self._slow_warnings.append(_fell_off(dev, why))

    def _take_slow_warnings(self) -> list[str]:
        if not self._slow_warnings:
            return []
        with _WARNINGS_LOCK:
            out, self._slow_warnings = self._slow_warnings, []
        return out

    def _lost_sample(self, dev: _Device) -> DeviceSample:
        assert dev.lost is not None
        base = DeviceSample(index=dev.index, vendor="nvidia", name=dev.name, uuid=dev.uuid,
                            pci_bus_id=dev.bus_id, lost=dev.lost)
        return dataclasses.replace(mark_all(base, Missing("gpu_lost", since=dev.lost.since)),
                                   xid_count=dev.xid_count, xids=tuple(dev.xids))

    def _poll_fast(self, dev: _Device, now: float) -> tuple[DeviceSample, list[ProcessSample]]:
        n, h = self.nvml, dev.handle
        f: dict[str, Any] = {**dev.static, **dev.slow}
        if f.get("mig_enabled") is True:
            why = Missing("unsupported", detail="not available with MIG enabled")
            f["util_gpu"] = f["util_mem"] = why
        else:
            util = dev.ask("util", dev.reader("nvmlDeviceGetUtilizationRates", (),
                                              "nvmlDeviceGetUtilizationRates",
                                              "c_nvmlUtilization_t"), h)
            f["util_gpu"] = _map(util, lambda u: float(u.gpu))
            f["util_mem"] = _map(util, lambda u: float(u.memory))
        f.update(self._memory(dev))
        f["temp_gpu"] = _map(self._temperature(dev), float)
        f["power_draw"] = _map(dev.ask("power", n.nvmlDeviceGetPowerUsage, h),
                               lambda mw: round(mw / 1000, 2))
        f["clock_sm"] = dev.ask("clock_sm", n.nvmlDeviceGetClockInfo, h, 1)
        f["clock_mem"] = dev.ask("clock_mem", n.nvmlDeviceGetClockInfo, h, 2)
        f["pstate"] = dev.ask("pstate", n.nvmlDeviceGetPerformanceState, h)
        f["fan"] = _map(dev.ask("fan", n.nvmlDeviceGetFanSpeed, h), float)
        f["throttle"] = _map(dev.ask("reasons", n.nvmlDeviceGetCurrentClocksEventReasons, h),
                             _reason_names)
        if not _ok(f.get("temp_margin", UNSUPPORTED)) and _ok(f["temp_gpu"]):
            # No margin call on this GPU: derive it from the thresholds read at start.
            limits = [f[k] for k in ("temp_max_operating", "temp_slowdown")
                      if _ok(f.get(k, UNSUPPORTED))]
            if limits:
                f["temp_margin"] = float(limits[0]) - f["temp_gpu"]
        f["xid_count"], f["xids"] = dev.xid_count, tuple(dev.xids)
        fast = {k: f[k] for k in _FAST_FIELDS if k in f}
        keep_equal(fast, dev.fast)
        f.update(fast)
        dev.fast = fast
        f.update(index=dev.index, vendor="nvidia", name=dev.name, uuid=dev.uuid,
                 pci_bus_id=dev.bus_id)
        return build(DeviceSample, f), self._processes(dev)

    def _memory(self, dev: _Device) -> dict[str, Any]:
        n, h = self.nvml, dev.handle
        version = getattr(n, "nvmlMemory_v2", None)
        if version is not None and "mem_v2" not in dev.off:
            m = dev.ask("mem_v2", dev.reader("nvmlDeviceGetMemoryInfo", (version,),
                                             "nvmlDeviceGetMemoryInfo_v2",
                                             "c_nvmlMemory_v2_t", version=version), h)
            if _ok(m):
                return {"mem_total": int(m.total), "mem_used": int(m.used),
                        "mem_reserved": int(m.reserved), "mem_free": int(m.free)}
            if m.reason != "unsupported":
                return dict.fromkeys(("mem_total", "mem_used", "mem_reserved", "mem_free"), m)
        m = dev.ask("mem", n.nvmlDeviceGetMemoryInfo, h)
        if not _ok(m):
            return dict.fromkeys(("mem_total", "mem_used", "mem_reserved", "mem_free"), m)
        # v1 "used" includes what the driver reserves; v2 splits it out.
        return {"mem_total": int(m.total), "mem_used": int(m.used),
                "mem_reserved": Missing("unsupported", detail="included in used (NVML v1)"),
                "mem_free": int(m.free)}

    def _temperature(self, dev: _Device) -> Any:
        n, h = self.nvml, dev.handle
        if "temp_v" not in dev.off and hasattr(n, "nvmlDeviceGetTemperatureV"):
            # The binding's default version, as its wrapper passes it.
            version = getattr(n, "nvmlTemperature_v1", 0)
            t = dev.ask("temp_v", dev.reader("nvmlDeviceGetTemperatureV", (0,),
                                             "nvmlDeviceGetTemperatureV",
                                             "c_nvmlTemperature_v1_t", "temperature",
                                             version=version, sensorType=0), h)
            if _ok(t) or t.reason != "unsupported":
                return t
        return dev.ask("temp", n.nvmlDeviceGetTemperature, h, 0)

    def _processes(self, dev: _Device) -> list[ProcessSample]:
        n = self.nvml
        handles: list[tuple[Any, int | None, int | None]] = [(dev.handle, None, None)]
        if dev.slow.get("mig_enabled") is True and dev.mig_handles:
            # The parent handle needs privileges under MIG; each MIG device answers for itself.
            handles = [(mh, gi, ci) for mh, gi, ci in dev.mig_handles]
        found: dict[int, dict[str, Any]] = {}
        for h, gi, ci in handles:
            # Versioned names: the unversioned wrappers raise a non-NVML error on old drivers.
            for kind, getter, fallback in (
                ("compute", "nvmlDeviceGetComputeRunningProcesses_v3",
                 "nvmlDeviceGetComputeRunningProcesses_v2"),
                ("graphics", "nvmlDeviceGetGraphicsRunningProcesses_v3",
                 "nvmlDeviceGetGraphicsRunningProcesses_v2"),
            ):
                procs = dev.ask(f"{kind}_procs", _running_processes, n, getter, h,
                                dev.proc_room)
                if not _ok(procs) and procs.reason == "unsupported" and hasattr(n, fallback):
                    procs = dev.ask(f"{kind}_procs_v2", getattr(n, fallback), h)
                if not _ok(procs):
                    continue
                for p in procs:
                    entry = found.setdefault(int(p.pid), {"kinds": [], "mem": None,
                                                          "gi": gi, "ci": ci})
                    entry["kinds"].append(kind)
                    if p.usedGpuMemory is not None:
                        entry["mem"] = max(entry["mem"] or 0, int(p.usedGpuMemory))
                    pgi = getattr(p, "gpuInstanceId", MIG_INSTANCE_NONE)
                    if gi is None and pgi not in (None, MIG_INSTANCE_NONE):
                        entry["gi"], entry["ci"] = int(pgi), int(p.computeInstanceId)
        util = dev.proc_util
        out = []
        last, procs = dev.procs or {}, {}
        for pid, e in sorted(found.items()):
            sm: float | Missing
            mem: float | Missing
            if isinstance(util, Missing):
                sm = mem = util
            else:
                # Processes idle in the last period get no sample: their use was 0.
                sm, mem = util.get(pid, (0.0, 0.0))
            values = {"kind": "+".join(e["kinds"]),
                      "gpu_mem": e["mem"] if e["mem"] is not None else Missing(
                          "unsupported", detail="not reported under WDDM"),
                      "sm_util": sm, "mem_util": mem, "gpu_instance": e["gi"],
                      "compute_instance": e["ci"]}
            was = last.get(pid)
            if was is not None and held(values, was):  # the same process, all of it as it was
                out.append(procs.setdefault(pid, was))
                continue
            procs[pid] = sample = ProcessSample(
                pid=was.pid if was is not None else pid, device_index=dev.index, **values)
            out.append(sample)
        dev.procs = procs  # whole: the slow tick's thread reads it
        return out

    # ------------------------------------------------------------------------------------------
    # slow tick

    def _poll_slow(self, dev: _Device, now: float, counters: bool = True) -> None:
        """Reads the slow fields into a new dict that replaces `dev.slow` when complete: a poll
        in another thread sees the last tick's or this one's, never half of each."""
        n, h = self.nvml, dev.handle
        if "clock_sm_max" not in dev.static and not self.brief:
            # Static, but 1.2 ms of CPU a call (H100, driver 580): read with the first slow
            # tick, so that the dashboard's first frame does not wait for it.
            dev.static = {**dev.static,
                          "clock_sm_max": dev.ask("clock_sm_max", n.nvmlDeviceGetMaxClockInfo,
                                                  h, 1),
                          "clock_mem_max": dev.ask("clock_mem_max", n.nvmlDeviceGetMaxClockInfo,
                                                   h, 2)}
        s = dict(dev.slow)
        if not self.brief:
            s["temp_margin"] = _map(dev.ask("margin", n.nvmlDeviceGetMarginTemperature, h),
                                    float)
            s["enc_util"] = _map(dev.ask("enc", n.nvmlDeviceGetEncoderUtilization, h),
                                 lambda v: float(v[0]))
            s["dec_util"] = _map(dev.ask("dec", n.nvmlDeviceGetDecoderUtilization, h),
                                 lambda v: float(v[0]))
        # Read again when the next slow tick would find them `state_interval` s old: never
        # older.
        state = not 0 <= now + self.slow_interval - dev.state_at <= self.state_interval
        if state:
            dev.state_at = now
            self._read_state(dev, s)
        self._read_mig(dev, s)
        if counters:
            self._read_fields(dev, s, now)
            self._read_gpm(dev, s, now)
        # Without GPM, PCIe traffic comes from the blocking 20 ms counter (_slow_tick).
        self._read_process_util(dev, s)
        if state:
            self._read_link_state(dev)
        else:
            _follow_rates(dev)
        keep_equal(s, dev.slow)  # what held still: last tick's objects
        dev.slow = s

    def _read_state(self, dev: _Device, s: dict[str, Any]) -> None:
        """What changes rarely, by an administrator's hand or a fault: limits, persistence, the
        PCIe link and its replays, ECC counts, retired pages and remapped rows, MIG mode (19
        calls a GPU). Its NVLink links' state and errors are read after the field values."""
        n, h = self.nvml, dev.handle
        s["power_limit"] = _map(dev.ask("power_limit", n.nvmlDeviceGetEnforcedPowerLimit, h),
                                lambda mw: round(mw / 1000, 2))
        dev.mig_mode = dev.ask("mig_mode", n.nvmlDeviceGetMigMode, h)
        if self.brief:
            return  # a one-shot's table shows the limit; MIG mode decides what it can read
        s["persistence_mode"] = _map(dev.ask("persistence", n.nvmlDeviceGetPersistenceMode, h),
                                     bool)
        s["pcie_gen"] = dev.ask("pcie_gen", n.nvmlDeviceGetCurrPcieLinkGeneration, h)
        s["pcie_width"] = dev.ask("pcie_width", n.nvmlDeviceGetCurrPcieLinkWidth, h)
        s["pcie_replays"] = dev.ask("pcie_replays", n.nvmlDeviceGetPcieReplayCounter, h)
        self._read_ecc(dev, s)
        rows = dev.ask("remapped", n.nvmlDeviceGetRemappedRows, h)
        s["remapped_corrected"] = _map(rows, lambda r: int(r[0]))
        s["remapped_uncorrected"] = _map(rows, lambda r: int(r[1]))
        s["remap_pending"] = _map(rows, lambda r: bool(r[2]))
        s["remap_failed"] = _map(rows, lambda r: bool(r[3]))

    def _read_ecc(self, dev: _Device, s: dict[str, Any]) -> None:
        """ECC counts, volatile and aggregate (the GPU's life), the uncorrected ones by where
        they struck (SRAM or DRAM); retired pages; the SRAM error threshold."""
        n, h = self.nvml, dev.handle
        counts = [name for scope in ("", "_aggregate") for name in (
            f"ecc_corrected{scope}", f"ecc_uncorrected{scope}", f"ecc_uncorrected_sram{scope}",
            f"ecc_uncorrected_dram{scope}")]
        if dev.static.get("ecc_enabled") is not True:
            s.update(dict.fromkeys((*counts, "ecc_sram_threshold_exceeded"),
                                   Missing("unsupported", detail="ECC is off")))
        else:
            for counter, scope in ((0, ""), (1, "_aggregate")):  # NVML_VOLATILE/AGGREGATE_ECC
                s[f"ecc_corrected{scope}"] = dev.ask(f"ecc_corr{scope}",
                                                     n.nvmlDeviceGetTotalEccErrors, h, 0, counter)
                s[f"ecc_uncorrected{scope}"] = dev.ask(f"ecc_unc{scope}",
                                                       n.nvmlDeviceGetTotalEccErrors, h, 1, counter)
                for where, location in (("sram", 7), ("dram", 2)):  # NVML_MEMORY_LOCATION_*
                    s[f"ecc_uncorrected_{where}{scope}"] = dev.ask(
                        f"ecc_{where}{scope}", n.nvmlDeviceGetMemoryErrorCounter, h, 1, counter,
                        location)
            s["ecc_sram_threshold_exceeded"] = dev.ask("sram_status", _sram_threshold, n, h)
        # Retired pages (before Ampere): by cause, multiple single-bit (0) and double-bit (1).
        s["retired_single_bit"] = _map(dev.ask("retired_sbe", n.nvmlDeviceGetRetiredPages, h, 0),
                                       len)
        s["retired_double_bit"] = _map(dev.ask("retired_dbe", n.nvmlDeviceGetRetiredPages, h, 1),
                                       len)
        s["retire_pending"] = _map(dev.ask("retire_pending",
                                           n.nvmlDeviceGetRetiredPagesPendingStatus, h), bool)

    def _read_mig(self, dev: _Device, s: dict[str, Any]) -> None:
        n, h = self.nvml, dev.handle
        s["mig_enabled"] = _map(dev.mig_mode, lambda m: m[0] == 1)
        if s["mig_enabled"] is not True:
            dev.mig_handles = []
            s["mig_devices"] = ()
            return
        handles = []
        count = dev.ask("mig_count", n.nvmlDeviceGetMaxMigDeviceCount, h)
        migs = []
        for i in range(count if _ok(count) else 0):
            try:
                mh = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except n.NVMLError as e:
                if getattr(e, "value", None) == ERR_GPU_IS_LOST:
                    raise _Lost(_err_text(e)) from None
                continue  # an empty slot answers NotFound
            gi = dev.ask("mig_gi", n.nvmlDeviceGetGpuInstanceId, mh)
            ci = dev.ask("mig_ci", n.nvmlDeviceGetComputeInstanceId, mh)
            if not (_ok(gi) and _ok(ci)):
                continue
            mem = dev.ask("mig_mem", n.nvmlDeviceGetMemoryInfo, mh)
            handles.append((mh, gi, ci))
            migs.append(MigDevice(
                gpu_instance=gi, compute_instance=ci,
                uuid=_map(dev.ask("mig_uuid", n.nvmlDeviceGetUUID, mh), _text),
                name=_map(dev.ask("mig_name", n.nvmlDeviceGetName, mh), _text),
                mem_total=_map(mem, lambda m: int(m.total)),
                mem_used=_map(mem, lambda m: int(m.used)),
                sm_active=Missing("unsupported"),
            ))
        dev.mig_handles = handles
        s["mig_devices"] = tuple(migs)

    def _read_fields(self, dev: _Device, s: dict[str, Any], now: float) -> None:
        """One batched nvmlDeviceGetFieldValues call: each value has its own status. It costs
        microseconds of CPU on an H100 (driver 580), where nvmlDeviceGetTotalEnergyConsumption
        costs 2.7 ms: the energy counter is read here, and through that call only on a GPU
        whose fields lack it."""
        if self.brief:
            return  # none of it shows in a one-shot's table
        n, h = self.nvml, dev.handle
        ids = dev.field_ids
        if not ids:
            ids = [(FI_MEMORY_TEMP, 0), (FI_TOTAL_ENERGY, 0)]
            ids += [(fid, 0) for fid in REASON_COUNTERS.values()]
            for link in dev.link_ids:
                ids += [(FI_NVLINK_DATA_TX, link), (FI_NVLINK_DATA_RX, link)]
            dev.field_ids = ids
        values = dev.ask("fields", _field_values, n, h, ids, dev.field_blank)
        if not _ok(values):
            for key in ("temp_mem", "throttle_time"):
                s[key] = values
            s["energy_j"] = self._energy_call(dev)
            return
        got: dict[tuple[int, int], Any] = {}
        # The answers come in the order asked, each with its own status; the NVLink counters
        # last.
        head = len(ids) - 2 * len(dev.link_ids)
        for asked, (ret, value, stamp) in zip(ids[:head], values[:head], strict=True):
            if ret:
                if ret == ERR_GPU_IS_LOST:
                    raise _Lost("GPU is lost")
                got[asked] = _NO_PERMISSION if ret == ERR_NO_PERMISSION else UNSUPPORTED
                continue
            got[asked] = (value, stamp)
        mt = got.get((FI_MEMORY_TEMP, 0), UNSUPPORTED)
        s["temp_mem"] = _map(mt, lambda x: float(x[0]))
        energy = got.get((FI_TOTAL_ENERGY, 0), UNSUPPORTED)
        s["energy_j"] = (round(energy[0] / 1000, 1) if _ok(energy)
                         else self._energy_call(dev))
        times = {r: got.get((fid, 0), UNSUPPORTED) for r, fid in REASON_COUNTERS.items()}
        known = {r: round(v[0] / 1e9, 3) for r, v in times.items() if _ok(v)}
        s["throttle_time"] = known if known else Missing("unsupported")
        dev.link_rates = self._nvlink_rates(dev, values[head:])

    def _energy_call(self, dev: _Device) -> Any:
        return _map(dev.ask("energy", self.nvml.nvmlDeviceGetTotalEnergyConsumption, dev.handle),
                    lambda mj: round(mj / 1000, 1))

    def _nvlink_rates(self, dev: _Device, answers: list[tuple[int, float | int, int]]
                      ) -> dict[int, dict[str, Any]]:
        """Each link's tx and rx rates since the last reading of its counters, from `answers`:
        the tx and rx counters of each of `dev.link_ids` in turn (144 on an 8-GPU node)."""
        prev = dev.nvlink_prev = dev.nvlink_prev or [None] * len(answers)
        out: dict[int, dict[str, Any]] = {link: {} for link in dev.link_ids}
        for i, (ret, value, ts) in enumerate(answers):
            rates, key = out[dev.link_ids[i >> 1]], "rx" if i & 1 else "tx"
            if ret:
                if ret == ERR_GPU_IS_LOST:
                    raise _Lost("GPU is lost")
                rates[key] = _NO_PERMISSION if ret == ERR_NO_PERMISSION else UNSUPPORTED
                continue
            kib, before = int(value), prev[i]
            prev[i] = (kib, ts)
            if before is None or ts <= before[1] or kib < before[0]:
                rates[key] = PENDING  # needs two readings
            else:
                rates[key] = round((kib - before[0]) * 1024 / ((ts - before[1]) / 1e6), 1)
        return out

    def _read_link_state(self, dev: _Device) -> None:
        """Each link's state and error counters, with the rates `_read_fields` worked out."""
        n, h, ask = self.nvml, dev.handle, dev.ask
        get_state, get_errors = n.nvmlDeviceGetNvLinkState, n.nvmlDeviceGetNvLinkErrorCounter
        updated = []
        for lk in dev.links:
            rates = dev.link_rates.get(lk.link, {})
            state = ask(f"nvlink_state{lk.link}", get_state, h, lk.link)
            errors: dict[str, int] = {}
            for name, counter, metric in _NVLINK_ERROR_METRICS:
                c = ask(metric, get_errors, h, lk.link, counter)
                if _ok(c):
                    errors[name] = int(c)
            updated.append(_with_rates(lk, rates, up=_map(state, bool),
                                       errors=errors if errors else Missing("unsupported")))
        dev.links = updated

    def _read_gpm(self, dev: _Device, s: dict[str, Any], now: float) -> None:
        n, h = self.nvml, dev.handle
        dev.gpm_pcie = False
        if "gpm" not in dev.off:
            support = dev.ask("gpm", n.nvmlGpmQueryDeviceSupport, h)  # caches unsupported
            if _ok(support) and not support.isSupportedDevice:
                dev.off["gpm"] = Missing("unsupported", detail="GPM needs Hopper or newer")
            elif not _ok(support) and "gpm" not in dev.off:
                return  # a passing error: ask again next slow tick
        if "gpm" in dev.off:
            for key in GPM_METRICS.values():
                if key not in ("pcie_rx", "pcie_tx"):  # those fall back to PCIe throughput
                    s[key] = dev.off["gpm"]
            return
        sample = dev.ask("gpm_alloc", n.nvmlGpmSampleAlloc)
        if not _ok(sample):
            return
        got = dev.ask("gpm_sample", n.nvmlGpmSampleGet, h, sample)
        if not _ok(got):
            n.nvmlGpmSampleFree(sample)
            for key in GPM_METRICS.values():
                s[key] = got
            return
        prev, dev.gpm_prev = dev.gpm_prev, sample
        # The previous slow tick's sample is the first of the pair: no sleep needed.
        if prev is None or now - dev.gpm_prev_time < GPM_MIN_INTERVAL:
            dev.gpm_prev_time = now if prev is None else dev.gpm_prev_time
            for key in GPM_METRICS.values():
                s.setdefault(key, Missing("pending"))
            if prev is not None:
                n.nvmlGpmSampleFree(prev)
            return
        dev.gpm_prev_time = now
        req = n.c_nvmlGpmMetricsGet_t()
        req.version = n.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(GPM_METRICS)
        req.sample1, req.sample2 = prev, sample
        for i, mid in enumerate(GPM_METRICS):
            req.metrics[i].metricId = mid
        res = dev.ask("gpm_metrics", n.nvmlGpmMetricsGet, req)
        n.nvmlGpmSampleFree(prev)
        for i, key in enumerate(GPM_METRICS.values()):
            if not _ok(res):
                s[key] = res
                continue
            m = res.metrics[i]
            if int(m.nvmlReturn) != 0:
                s[key] = Missing("unsupported")
            elif key in ("pcie_rx", "pcie_tx"):
                s[key] = round(float(m.value) * MIB, 1)
                dev.gpm_pcie = True
            else:
                s[key] = round(float(m.value), 1)

    def _read_process_util(self, dev: _Device, s: dict[str, Any]) -> None:
        n = self.nvml
        if s.get("mig_enabled") is True:
            dev.proc_util = Missing("unsupported", detail="not available with MIG enabled")
            return
        if dev.procs == {}:
            # No process on it at the last poll: the samples would go with none, and the call
            # costs the driver its 1.4 ms on an idle GPU too. What an idle GPU answers: none.
            dev.proc_util = {}
            return
        samples: Any = UNSUPPORTED
        if (hasattr(n, "nvmlDeviceGetProcessesUtilizationInfo")
                and "proc_util_info" not in dev.off):
            samples = self._ask_samples(dev, "proc_util_info", _processes_utilization)
        if not _ok(samples) and samples.reason == "unsupported":
            samples = self._ask_samples(dev, "proc_util", _process_utilization)
        if not _ok(samples):
            dev.proc_util = samples
            return
        util: dict[int, tuple[float, float]] = {}
        for smp in samples:
            ts = int(smp.timeStamp)
            dev.proc_util_seen = max(dev.proc_util_seen, ts)
            util[int(smp.pid)] = (float(smp.smUtil), float(smp.memUtil))
        dev.proc_util = util

    def _ask_samples(self, dev: _Device, metric: str, fn: Callable[..., Any]) -> Any:
        # NotFound means "no process used the GPU since lastSeenTimeStamp": an empty answer.
        return dev.ask(metric, _raise_not_found_as_empty(self.nvml, fn), self.nvml, dev.handle,
                       dev.proc_util_seen, dev.proc_room)


def _xid_missing(e: Exception) -> Missing:
    """Why a GPU's Xid events are not watched, from the error that said so."""
    code = getattr(e, "value", None)
    if code in _UNSUPPORTED_CODES:
        return Missing("unsupported", detail="no Xid events from this driver or GPU")
    if code == ERR_NO_PERMISSION:
        return Missing("no_permission")
    return Missing("error", detail=f"Xid events: {_err_text(e)}")


def _raise_not_found_as_empty(nvml: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except nvml.NVMLError as e:
            if getattr(e, "value", None) == ERR_NOT_FOUND:
                return []
            raise

    return call


def _reason_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in REASON_BITS.items() if mask & bit)


def _follow_rates(dev: _Device) -> None:
    """Its links with the rates the last field values gave, their state and errors as read."""
    dev.links = [_with_rates(lk, dev.link_rates.get(lk.link, {})) for lk in dev.links]


def _with_rates(lk: LinkSample, rates: dict[str, Any], up: Any = None,
                errors: Any = None) -> LinkSample:
    """`lk` with these rates (and state and errors): 144 links every slow tick. What did not
    change is `lk`'s own (the whole of `lk` where nothing did): the diagnostics keep minutes of
    ticks, and a link's error counters, an idle link's rates, seldom change."""
    rx, tx = rates.get("rx", lk.rx), rates.get("tx", lk.tx)
    rx = lk.rx if rx == lk.rx else rx
    tx = lk.tx if tx == lk.tx else tx
    up = lk.up if up is None or up == lk.up else up
    errors = lk.errors if errors is None or errors == lk.errors else errors
    if rx is lk.rx and tx is lk.tx and up is lk.up and errors is lk.errors:
        return lk
    return replace(lk, up=up, rx=rx, tx=tx, errors=errors)


_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # valueType
# The same members as struct formats, and nvmlFieldValue_t as the header file lays it out:
# fieldId, scopeId (uint32), timestamp, latencyUsec (int64), valueType, nvmlReturn (enums),
# value (an 8-byte union).
_VALUE_FORMATS = tuple(struct.Struct(f) for f in (
    "=d", "=I", "=Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "=I", "=Q", "=q", "=i", "=H"))
_UNKNOWN_TYPE = struct.Struct("=Q")
_FIELD_LAYOUT = {"fieldId": 0, "scopeId": 4, "timestamp": 8, "latencyUsec": 16,
                 "valueType": 24, "nvmlReturn": 28, "value": 32}
_FIELD = struct.Struct("=IIqqII8s")


def _field_values(nvml: Any, handle: Any, ids: list[tuple[int, int]],
                  blank: dict[int, bytes]) -> list[tuple[int, float | int, int]]:
    """nvmlDeviceGetFieldValues: each value asked in `ids` as (status, value, timestamp).

    The binding's wrapper fills the request and is read back field by field through its
    structs' attribute hooks: 0.5 ms a GPU of 40 fields. Here the request is copied from
    its bytes built once (`blank`, keyed by the binding's struct) and the answer read with
    one unpack; where the binding's struct is not laid out as expected, its wrapper."""
    struct_t = nvml.c_nvmlFieldValue_t
    pointer = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if pointer is None or not _laid_out(struct_t):
        return [(int(v.nvmlReturn), _field_value(v), int(v.timestamp))
                for v in nvml.nvmlDeviceGetFieldValues(handle, ids)]
    fn = pointer("nvmlDeviceGetFieldValues")
    array = (struct_t * len(ids))()
    key = id(struct_t)
    if key not in blank:
        for i, (fid, scope) in enumerate(ids):
            array[i].fieldId, array[i].scopeId = fid, scope
        blank[key] = bytes(array)
    else:
        ctypes.memmove(array, blank[key], len(blank[key]))
    ret = fn(handle, ctypes.c_int32(len(ids)), ctypes.byref(array))
    if ret != 0:
        raise nvml.NVMLError(ret)
    out: list[tuple[int, float | int, int]] = []
    for _, _, stamp, _, vtype, status, raw in _FIELD.iter_unpack(bytes(array)):
        fmt = _VALUE_FORMATS[vtype] if 0 <= vtype < len(_VALUE_FORMATS) else _UNKNOWN_TYPE
        out.append((status, fmt.unpack_from(raw)[0], stamp))
    return out


@functools.cache
def _laid_out(struct_t: Any) -> bool:
    """Whether the binding's nvmlFieldValue_t is laid out as `_FIELD` reads it."""
    return (ctypes.sizeof(struct_t) == _FIELD.size
            and all(getattr(struct_t, name).offset == at for name, at in _FIELD_LAYOUT.items()))


def _field_value(v: Any) -> float | int:
    t = int(v.valueType)
    member = _VALUE_MEMBERS[t] if 0 <= t < len(_VALUE_MEMBERS) else "ullVal"
    result: float | int = getattr(v.value, member)
    return result


def _or_blank(v: Any) -> str:
    return "" if v is None or not _ok(v) else str(v)
