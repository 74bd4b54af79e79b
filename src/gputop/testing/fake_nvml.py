"""A stand-in for libnvidia-ml.so.1, driven by recorded Snapshots.

It sits where the C library sits: NVIDIA's real binding (`pynvml`) loads it as `pynvml.nvmlLib`
and calls its C-named functions with ctypes arguments, exactly as it calls the driver's library.
So tests run the real gputop NVML source *and* the real binding's struct handling, versioned
calls and error mapping; only the library underneath is replaced.

    with FakeNvml(snapshots) as fake:      # installs itself under pynvml
        src = NvmlSource(); src.open()
        src.poll(now); fake.advance(); ...

Faults are injected per call: `Fault("nvmlDeviceGetPowerUsage", NVML_ERROR_NO_PERMISSION)`,
`Fault("*", NVML_ERROR_GPU_IS_LOST, device=3, after=2)` (GPU 3 falls off the bus on tick 2),
`Fault("nvmlInitWithFlags", NVML_ERROR_LIB_RM_VERSION_MISMATCH)`.

Xid events are injected by tick: `FakeNvml(snaps, xids=[XidAt(tick=5, device=3, xid=79)])`. The
event set answers `nvmlEventSetWait_v2` as the driver does: an event of a registered GPU once its
tick has come, else NVMLError_Timeout after the timeout (at once after nvmlShutdown): the next
poll after `advance` takes the events of the new tick.
`Fault("nvmlDeviceRegisterEvents", NOT_SUPPORTED)` makes a GPU offer none.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pynvml

from gputop.model import UNSUPPORTED, DeviceSample, LinkSample, Missing, ProcessSample, Snapshot

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
TIMEOUT = 10
GPU_IS_LOST = 15
_REASON_CODES = {"unsupported": NOT_SUPPORTED, "no_permission": NO_PERMISSION,
                 "gpu_lost": GPU_IS_LOST, "not_visible": NOT_SUPPORTED, "error": 999,
                 "stale": 999, "pending": NOT_SUPPORTED}
_HANDLE_BASE = 0x10000
_MIG_BASE = 0x20000
_EVENT_SET_BASE = 0x40000
_EVENT_SETS = itertools.count(1)  # unique across fakes: a set is never mistaken for another's
EVENT_XID = 0x8
SUPPORTED_EVENTS = 0xFF9F  # what an H100 on driver 580 offers (measured)
_NVLINK_VERSION = {"1.0": 1, "2.0": 2, "2.2": 3, "3.0": 4, "3.1": 5, "4.0": 6, "5.0": 7, "6.0": 8}
_NVLINK_REMOTE = {"gpu": 0, "cpu": 1, "switch": 2}
_TOPO_LEVEL = {"X": 0, "PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
_REASON_BIT = {"gpu_idle": 0x1, "app_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
               "sync_boost": 0x10, "sw_thermal": 0x20, "hw_thermal": 0x40,
               "hw_power_brake": 0x80, "display_clocks": 0x100}
_REASON_FIELD = {74: "sw_power_cap", 76: "sync_boost", 269: "sw_thermal", 270: "hw_thermal",
                 271: "hw_power_brake"}
_GPM_FIELD = {1: "gr_active", 2: "sm_active", 3: "sm_occupancy", 5: "tensor_active",
              10: "dram_active", 20: "pcie_tx", 21: "pcie_rx"}


@dataclass(frozen=True)
class Fault:
    """Make `function` (a C name, or "*" for every call about a device) return `code`."""

    function: str
    code: int
    device: int | None = None
    after: int = 0  # first tick the fault applies to


@dataclass(frozen=True)
class XidAt:
    """An Xid event on `device`, delivered from tick `tick` on."""

    tick: int
    device: int
    xid: int


class _Fail(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _out(ref: Any) -> Any:
    """The ctypes object behind byref(x)."""
    return ref._obj


def _val(x: Any) -> Any:
    return x.value if hasattr(x, "value") else x


def _put_str(buf: Any, s: str) -> None:
    raw = s.encode()[: len(buf) - 1]
    ctypes.memmove(buf, raw + b"\0", len(raw) + 1)


def _want(v: Any) -> Any:
    if isinstance(v, Missing):
        raise _Fail(_REASON_CODES[v.reason])
    return v


def _set_pointer(ref: Any, address: int) -> None:
    ptr = _out(ref)
    ctypes.cast(ctypes.byref(ptr), ctypes.POINTER(ctypes.c_void_p))[0] = address


def _address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class FakeNvml:
    """Serves `snapshots[tick]` through NVML's C API. `advance()` moves to the next tick."""

    def __init__(self, snapshots: Sequence[Snapshot], *, faults: Sequence[Fault] = (),
                 xids: Sequence[XidAt] = (), driver_version: str = "580.159.04",
                 cuda_version: int = 13000, nvml_version: str = "13.580.159.04") -> None:
        if not snapshots:
            raise ValueError("FakeNvml needs at least one snapshot")
        self.snapshots = list(snapshots)
        self.faults = list(faults)
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.nvml_version = nvml_version
        self.tick = 0
        self.calls: Counter[str] = Counter()
        self._gpm_samples: dict[int, tuple[int, int]] = {}
        self._next_sample = 1
        self._saved: tuple[Any, dict[str, Any]] | None = None
        self._nvlink_kib = self._integrate_nvlink()
        # Events: a thread waiting for them and the test's thread meet under one lock.
        self.xids = sorted(xids, key=lambda x: x.tick)
        self.delivered: list[XidAt] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # for waiters: something changed
        self._sets: dict[int, dict[int, int]] = {}  # event set -> device -> registered types
        self._shutdowns = 0
        self._installed = False

    # ------------------------------------------------------------------------------------------
    # installing under the real binding

    def install(self) -> FakeNvml:
        self._saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache))
        pynvml.nvmlLib = self
        pynvml._nvmlGetFunctionPointer_cache.clear()
        self._installed = True
        return self

    def uninstall(self) -> None:
        with self._lock:  # a thread still waiting on this library hears it is gone
            self._installed = False
            self._wake.notify_all()
        if self._saved is not None:
            pynvml.nvmlLib, cache = self._saved
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlGetFunctionPointer_cache.update(cache)
            self._saved = None

    def __enter__(self) -> FakeNvml:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.tick += n
            self._wake.notify_all()

    # ------------------------------------------------------------------------------------------
    # the C entry points: pynvml looks them up with getattr(nvmlLib, name)

    def __getattr__(self, name: str) -> Callable[..., int]:
        impl = getattr(type(self), "c_" + name, None)
        if impl is None:
            raise AttributeError(name)  # pynvml turns this into NVMLError_FunctionNotFound

        def entry(*args: Any) -> int:
            with self._lock:  # the event thread calls in too
                self.calls[name] += 1
            try:
                self._check_faults(name, args)
                result = impl(self, *args)
            except _Fail as f:
                return f.code
            return SUCCESS if result is None else result

        return entry

    def _check_faults(self, name: str, args: tuple[Any, ...]) -> None:
        device = self._device_of(args[0]) if args and _is_handle(args[0]) else None
        for f in self.faults:
            if self.tick < f.after or (f.function not in (name, "*")):
                continue
            if f.function == "*" and device is None:
                continue
            if f.device is not None and f.device != device:
                continue
            raise _Fail(f.code)

    # ------------------------------------------------------------------------------------------
    # recorded data

    @property
    def snap(self) -> Snapshot:
        return self.snapshots[min(self.tick, len(self.snapshots) - 1)]

    def _device_of(self, handle: Any) -> int:
        addr = _address(handle)
        if addr >= _MIG_BASE:
            return (addr - _MIG_BASE) // 64
        return addr - _HANDLE_BASE

    def _dev(self, handle: Any) -> DeviceSample:
        index = self._device_of(handle)
        for d in self.snap.devices:
            if d.index == index:
                if d.lost is not None:
                    raise _Fail(GPU_IS_LOST)
                return d
        raise _Fail(GPU_IS_LOST)

    def _get(self, handle: Any, name: str) -> Any:
        """A device field at this tick; a value still pending is served from a later tick."""
        v = getattr(self._dev(handle), name)
        if isinstance(v, Missing) and v.reason == "pending":
            index = self._device_of(handle)
            for snap in self.snapshots[self.tick + 1:]:
                d = next((x for x in snap.devices if x.index == index), None)
                later = getattr(d, name) if d is not None else v
                if not isinstance(later, Missing):
                    return later
        return _want(v)

    def _links(self, handle: Any) -> dict[int, LinkSample]:
        index = self._device_of(handle)
        return {lk.link: lk for lk in self.snap.links if lk.device_index == index}

    def _link(self, handle: Any, link: Any) -> LinkSample:
        lk = self._links(handle).get(int(_val(link)))
        if lk is None:
            raise _Fail(NOT_SUPPORTED)
        return lk

    def _procs(self, handle: Any, kind: str) -> list[ProcessSample]:
        addr = _address(handle)
        index = self._device_of(handle)
        procs = [p for p in self.snap.processes
                 if p.device_index == index and kind in p.kind.split("+")]
        if addr >= _MIG_BASE:
            mig = self._dev(handle).mig_devices[(addr - _MIG_BASE) % 64]
            procs = [p for p in procs if p.gpu_instance == mig.gpu_instance]
        return procs

    def _integrate_nvlink(self) -> dict[tuple[int, int, str], list[int]]:
        """Cumulative KiB per (device, link, direction) per tick, from the recorded rates. A
        counter whose rate is unsupported at every tick is not offered (NotSupported)."""
        out: dict[tuple[int, int, str], list[int]] = {}
        offered: set[tuple[int, int, str]] = set()
        prev_time = None
        for snap in self.snapshots:
            dt = 0.0 if prev_time is None else snap.time - prev_time
            prev_time = snap.time
            for lk in snap.links:
                for key in ("rx", "tx"):
                    series = out.setdefault((lk.device_index, lk.link, key), [])
                    total = series[-1] if series else 0
                    rate = getattr(lk, key)
                    if rate != UNSUPPORTED:
                        offered.add((lk.device_index, lk.link, key))
                    step = 0 if isinstance(rate, Missing) else rate * dt / 1024
                    series.append(round(total + step))
        return {k: v for k, v in out.items() if k in offered}

    # ------------------------------------------------------------------------------------------
    # system

    def c_nvmlInit_v2(self) -> None:
        pass

    def c_nvmlInitWithFlags(self, flags: Any) -> None:
        pass

    def c_nvmlShutdown(self) -> None:
        with self._lock:
            self._shutdowns += 1
            self._wake.notify_all()

    def c_nvmlErrorString(self, code: Any) -> bytes:
        return b"fake NVML error"

    def c_nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> None:
        _put_str(buf, self.driver_version)

    def c_nvmlSystemGetNVMLVersion(self, buf: Any, size: Any) -> None:
        _put_str(buf, self.nvml_version)

    def c_nvmlSystemGetCudaDriverVersion_v2(self, ref: Any) -> None:
        _out(ref).value = self.cuda_version

    def c_nvmlDeviceGetCount_v2(self, ref: Any) -> None:
        _out(ref).value = len(self.snapshots[0].devices)

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> None:
        i = int(_val(index))
        if i >= len(self.snapshots[0].devices):
            raise _Fail(2)
        _set_pointer(ref, _HANDLE_BASE + i)

    # ------------------------------------------------------------------------------------------
    # identity and static facts

    def c_nvmlDeviceGetName(self, h: Any, buf: Any, size: Any) -> None:
        addr = _address(h)
        if addr >= _MIG_BASE:
            mig = self._dev(h).mig_devices[(addr - _MIG_BASE) % 64]
            _put_str(buf, _want(mig.name))
        else:
            _put_str(buf, self._dev(h).name)

    def c_nvmlDeviceGetUUID(self, h: Any, buf: Any, size: Any) -> None:
        addr = _address(h)
        if addr >= _MIG_BASE:
            _put_str(buf, _want(self._dev(h).mig_devices[(addr - _MIG_BASE) % 64].uuid))
        else:
            _put_str(buf, self._dev(h).uuid)

    def c_nvmlDeviceGetPciInfo_v3(self, h: Any, ref: Any) -> None:
        info = _out(ref)
        bus = self._dev(h).pci_bus_id
        info.busId = bus.encode()
        info.busIdLegacy = bus[-12:].encode()

    def c_nvmlDeviceGetMaxClockInfo(self, h: Any, kind: Any, ref: Any) -> None:
        name = {1: "clock_sm_max", 0: "clock_sm_max", 2: "clock_mem_max"}.get(int(_val(kind)))
        if name is None:
            raise _Fail(NOT_SUPPORTED)
        _out(ref).value = int(self._get(h, name))

    def c_nvmlDeviceGetTemperatureThreshold(self, h: Any, kind: Any, ref: Any) -> None:
        name = {0: "temp_shutdown", 1: "temp_slowdown", 3: "temp_max_operating"}.get(
            int(_val(kind)))
        if name is None:
            raise _Fail(NOT_SUPPORTED)
        _out(ref).value = int(self._get(h, name))

    def c_nvmlDeviceGetPowerManagementDefaultLimit(self, h: Any, ref: Any) -> None:
        _out(ref).value = round(self._get(h, "power_default_limit") * 1000)

    def c_nvmlDeviceGetCudaComputeCapability(self, h: Any, major: Any, minor: Any) -> None:
        a, b = str(self._get(h, "compute_capability")).split(".")
        _out(major).value, _out(minor).value = int(a), int(b)

    def c_nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "pcie_gen_max"))

    def c_nvmlDeviceGetMaxPcieLinkWidth(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "pcie_width_max"))

    def c_nvmlDeviceGetEccMode(self, h: Any, cur: Any, pending: Any) -> None:
        on = int(bool(self._get(h, "ecc_enabled")))
        _out(cur).value = _out(pending).value = on

    def c_nvmlDeviceGetNumaNodeId(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "numa_node"))

    def c_nvmlDeviceGetCpuAffinity(self, h: Any, words: Any, ref: Any) -> None:
        arr = _out(ref)
        for part in str(self._get(h, "cpu_affinity")).split(","):
            lo, _, hi = part.partition("-")
            for cpu in range(int(lo), int(hi or lo) + 1):
                if cpu // 64 < len(arr):
                    arr[cpu // 64] |= 1 << (cpu % 64)

    # ------------------------------------------------------------------------------------------
    # the fast tick

    def c_nvmlDeviceGetUtilizationRates(self, h: Any, ref: Any) -> None:
        u = _out(ref)
        u.gpu = int(self._get(h, "util_gpu"))
        u.memory = int(self._get(h, "util_mem"))

    def c_nvmlDeviceGetMemoryInfo_v2(self, h: Any, ref: Any) -> None:
        m = _out(ref)
        m.total = self._get(h, "mem_total")
        m.used = self._get(h, "mem_used")
        m.reserved = self._get(h, "mem_reserved")
        m.free = self._get(h, "mem_free")

    def c_nvmlDeviceGetMemoryInfo(self, h: Any, ref: Any) -> None:
        m = _out(ref)
        addr = _address(h)
        if addr >= _MIG_BASE:
            mig = self._dev(h).mig_devices[(addr - _MIG_BASE) % 64]
            m.total, m.used = _want(mig.mem_total), _want(mig.mem_used)
            m.free = m.total - m.used
            return
        d = self._dev(h)
        reserved = d.mem_reserved if not isinstance(d.mem_reserved, Missing) else 0
        m.total = self._get(h, "mem_total")
        m.used = self._get(h, "mem_used") + reserved
        m.free = self._get(h, "mem_free")

    def c_nvmlDeviceGetTemperatureV(self, h: Any, ref: Any) -> None:
        _out(ref).temperature = int(self._get(h, "temp_gpu"))

    def c_nvmlDeviceGetTemperature(self, h: Any, sensor: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "temp_gpu"))

    def c_nvmlDeviceGetPowerUsage(self, h: Any, ref: Any) -> None:
        _out(ref).value = round(self._get(h, "power_draw") * 1000)

    def c_nvmlDeviceGetClockInfo(self, h: Any, kind: Any, ref: Any) -> None:
        name = {0: "clock_sm", 1: "clock_sm", 2: "clock_mem"}.get(int(_val(kind)))
        if name is None:
            raise _Fail(NOT_SUPPORTED)
        _out(ref).value = int(self._get(h, name))

    def c_nvmlDeviceGetPerformanceState(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "pstate"))

    def c_nvmlDeviceGetFanSpeed(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "fan"))

    def c_nvmlDeviceGetCurrentClocksEventReasons(self, h: Any, ref: Any) -> None:
        mask = 0
        for name in self._get(h, "throttle"):
            mask |= _REASON_BIT.get(name, 0)
        _out(ref).value = mask

    def _running(self, h: Any, count_ref: Any, array: Any, kind: str) -> int | None:
        procs = self._procs(h, kind)
        count = _out(count_ref)
        if array is None:
            count.value = len(procs)
            return INSUFFICIENT_SIZE if procs else SUCCESS
        if count.value < len(procs):
            count.value = len(procs)
            return INSUFFICIENT_SIZE
        for i, p in enumerate(procs):
            array[i].pid = p.pid
            mem = p.gpu_mem
            array[i].usedGpuMemory = (pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
                                      if isinstance(mem, Missing) else mem)
            array[i].gpuInstanceId = 0xFFFFFFFF if p.gpu_instance is None else p.gpu_instance
            array[i].computeInstanceId = (0xFFFFFFFF if p.compute_instance is None
                                          else p.compute_instance)
        count.value = len(procs)
        return None

    def c_nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, c: Any, a: Any) -> int | None:
        return self._running(h, c, a, "compute")

    def c_nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any, c: Any, a: Any) -> int | None:
        return self._running(h, c, a, "graphics")

    # Drivers older than the binding lack the _v3 symbols; the same struct layout answers _v2.
    c_nvmlDeviceGetComputeRunningProcesses_v2 = c_nvmlDeviceGetComputeRunningProcesses_v3
    c_nvmlDeviceGetGraphicsRunningProcesses_v2 = c_nvmlDeviceGetGraphicsRunningProcesses_v3

    # ------------------------------------------------------------------------------------------
    # the slow tick

    def c_nvmlDeviceGetEnforcedPowerLimit(self, h: Any, ref: Any) -> None:
        _out(ref).value = round(self._get(h, "power_limit") * 1000)

    def c_nvmlDeviceGetTotalEnergyConsumption(self, h: Any, ref: Any) -> None:
        _out(ref).value = round(self._get(h, "energy_j") * 1000)

    def c_nvmlDeviceGetPersistenceMode(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(bool(self._get(h, "persistence_mode")))

    def c_nvmlDeviceGetMarginTemperature(self, h: Any, ref: Any) -> None:
        _out(ref).marginTemperature = int(self._get(h, "temp_margin"))

    def c_nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "pcie_gen"))

    def c_nvmlDeviceGetCurrPcieLinkWidth(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "pcie_width"))

    def c_nvmlDeviceGetPcieReplayCounter(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(self._get(h, "pcie_replays"))

    def c_nvmlDeviceGetPcieThroughput(self, h: Any, counter: Any, ref: Any) -> None:
        name = "pcie_tx" if int(_val(counter)) == 0 else "pcie_rx"
        _out(ref).value = int(self._get(h, name) / 1024)

    def c_nvmlDeviceGetEncoderUtilization(self, h: Any, ref: Any, period: Any) -> None:
        _out(ref).value = int(self._get(h, "enc_util"))
        _out(period).value = 167000

    def c_nvmlDeviceGetDecoderUtilization(self, h: Any, ref: Any, period: Any) -> None:
        _out(ref).value = int(self._get(h, "dec_util"))
        _out(period).value = 167000

    def c_nvmlDeviceGetTotalEccErrors(self, h: Any, kind: Any, counter: Any, ref: Any) -> None:
        name = "ecc_uncorrected" if int(_val(kind)) == 1 else "ecc_corrected"
        scope = "_aggregate" if int(_val(counter)) == 1 else ""
        _out(ref).value = int(self._get(h, name + scope))

    def c_nvmlDeviceGetMemoryErrorCounter(self, h: Any, kind: Any, counter: Any, location: Any,
                                          ref: Any) -> None:
        where = {7: "sram", 2: "dram"}.get(int(_val(location)))
        if int(_val(kind)) != 1 or where is None:
            raise _Fail(NOT_SUPPORTED)  # a recording keeps only the uncorrected SRAM and DRAM
        scope = "_aggregate" if int(_val(counter)) == 1 else ""
        _out(ref).value = int(self._get(h, f"ecc_uncorrected_{where}{scope}"))

    def c_nvmlDeviceGetSramEccErrorStatus(self, h: Any, ref: Any) -> None:
        _out(ref).bThresholdExceeded = int(bool(self._get(h, "ecc_sram_threshold_exceeded")))

    def c_nvmlDeviceGetRetiredPages(self, h: Any, cause: Any, count: Any, pages: Any) -> int:
        name = "retired_double_bit" if int(_val(cause)) == 1 else "retired_single_bit"
        n = int(self._get(h, name))
        room = _out(count).value
        _out(count).value = n
        if not pages or room < n:
            return SUCCESS if n == 0 else INSUFFICIENT_SIZE
        for i in range(n):
            pages[i] = 0x1000 * (i + 1)  # a recording keeps the count, not the addresses
        return SUCCESS

    def c_nvmlDeviceGetRetiredPagesPendingStatus(self, h: Any, ref: Any) -> None:
        _out(ref).value = int(bool(self._get(h, "retire_pending")))

    def c_nvmlDeviceGetRemappedRows(self, h: Any, corr: Any, unc: Any, pending: Any,
                                    failed: Any) -> None:
        _out(corr).value = int(self._get(h, "remapped_corrected"))
        _out(unc).value = int(self._get(h, "remapped_uncorrected"))
        _out(pending).value = int(bool(self._get(h, "remap_pending")))
        _out(failed).value = int(bool(self._get(h, "remap_failed")))

    def c_nvmlDeviceGetMigMode(self, h: Any, cur: Any, pending: Any) -> None:
        on = int(bool(self._get(h, "mig_enabled")))
        _out(cur).value = _out(pending).value = on

    def c_nvmlDeviceGetMaxMigDeviceCount(self, h: Any, ref: Any) -> None:
        _out(ref).value = len(self._dev(h).mig_devices)

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, index: Any, ref: Any) -> None:
        i = int(_val(index))
        if i >= len(self._dev(h).mig_devices):
            raise _Fail(NOT_FOUND)
        _set_pointer(ref, _MIG_BASE + self._device_of(h) * 64 + i)

    def _mig(self, h: Any) -> Any:
        addr = _address(h)
        if addr < _MIG_BASE:
            raise _Fail(2)
        return self._dev(h).mig_devices[(addr - _MIG_BASE) % 64]

    def c_nvmlDeviceGetGpuInstanceId(self, h: Any, ref: Any) -> None:
        _out(ref).value = self._mig(h).gpu_instance

    def c_nvmlDeviceGetComputeInstanceId(self, h: Any, ref: Any) -> None:
        _out(ref).value = self._mig(h).compute_instance

    def c_nvmlDeviceGetFieldValues(self, h: Any, count: Any, ref: Any) -> None:
        values = _out(ref)
        self._dev(h)  # a lost GPU fails the whole call
        index = self._device_of(h)
        ts = int(self.snap.time * 1e6)
        for i in range(int(_val(count))):
            v = values[i]
            fid, scope = int(v.fieldId), int(v.scopeId)
            v.timestamp = ts
            try:
                if fid == 82:
                    v.valueType, v.value.uiVal = 1, int(self._get(h, "temp_mem"))
                elif fid in _REASON_FIELD:
                    times = self._get(h, "throttle_time")
                    if _REASON_FIELD[fid] not in times:
                        raise _Fail(NOT_SUPPORTED)
                    v.valueType = 3
                    v.value.ullVal = round(times[_REASON_FIELD[fid]] * 1e9)
                elif fid in (138, 139):
                    series = self._nvlink_kib.get((index, scope, "tx" if fid == 138 else "rx"))
                    if series is None:
                        raise _Fail(NOT_SUPPORTED)
                    v.valueType = 3
                    v.value.ullVal = series[min(self.tick, len(series) - 1)]
                else:
                    raise _Fail(NOT_SUPPORTED)
                v.nvmlReturn = SUCCESS
            except _Fail as f:
                v.nvmlReturn = f.code

    # ------------------------------------------------------------------------------------------
    # NVLink and topology

    def c_nvmlDeviceGetNvLinkState(self, h: Any, link: Any, ref: Any) -> None:
        _out(ref).value = int(bool(_want(self._link(h, link).up)))

    def c_nvmlDeviceGetNvLinkVersion(self, h: Any, link: Any, ref: Any) -> None:
        _out(ref).value = _NVLINK_VERSION[_want(self._link(h, link).version)]

    def c_nvmlDeviceGetNvLinkRemotePciInfo_v2(self, h: Any, link: Any, ref: Any) -> None:
        _out(ref).busId = str(_want(self._link(h, link).remote_bus_id)).encode()

    def c_nvmlDeviceGetNvLinkRemoteDeviceType(self, h: Any, link: Any, ref: Any) -> None:
        _out(ref).value = _NVLINK_REMOTE.get(_want(self._link(h, link).remote_kind), 0xFF)

    def c_nvmlDeviceGetNvLinkErrorCounter(self, h: Any, link: Any, counter: Any,
                                          ref: Any) -> None:
        errors = _want(self._link(h, link).errors)
        name = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}.get(int(_val(counter)))
        if name not in errors:
            raise _Fail(NOT_SUPPORTED)
        _out(ref).value = int(errors[name])

    def _topo_label(self, a: Any, b: Any) -> str:
        topo = self.snap.topology
        i, j = self._device_of(a), self._device_of(b)
        if topo is None or i >= len(topo.matrix) or j >= len(topo.matrix):
            raise _Fail(NOT_SUPPORTED)
        return topo.matrix[i][j]

    def c_nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any, ref: Any) -> None:
        label = self._topo_label(a, b)
        if label == "X":
            raise _Fail(NOT_SUPPORTED)  # NVML answers NotSupported for a GPU with itself
        # NVLinked pairs still have a PCIe path; these recordings don't carry it.
        _out(ref).value = _TOPO_LEVEL.get(label, 50)

    def c_nvmlDeviceGetP2PStatus(self, a: Any, b: Any, index: Any, ref: Any) -> None:
        label = self._topo_label(a, b)
        nvlink = int(_val(index)) == 2
        _out(ref).value = 0 if (not nvlink or label.startswith("NV")) else 5

    # ------------------------------------------------------------------------------------------
    # events

    def c_nvmlEventSetCreate(self, ref: Any) -> None:
        sid = _EVENT_SET_BASE + next(_EVENT_SETS)
        with self._lock:
            self._sets[sid] = {}
        _set_pointer(ref, sid)

    def c_nvmlEventSetFree(self, es: Any) -> None:
        with self._lock:
            if self._sets.pop(_address(es), None) is None:
                raise _Fail(INVALID_ARGUMENT)

    def c_nvmlDeviceGetSupportedEventTypes(self, h: Any, ref: Any) -> None:
        self._dev(h)
        _out(ref).value = SUPPORTED_EVENTS

    def c_nvmlDeviceRegisterEvents(self, h: Any, types: Any, es: Any) -> None:
        self._dev(h)
        mask = int(_val(types))
        if mask & ~SUPPORTED_EVENTS:
            raise _Fail(NOT_SUPPORTED)
        with self._lock:
            registered = self._sets.get(_address(es))
            if registered is None:
                raise _Fail(INVALID_ARGUMENT)
            registered[self._device_of(h)] = mask

    def _due(self, sid: int) -> int | None:
        """The position in `xids` of the next event this set should deliver now."""
        registered = self._sets.get(sid, {})
        for i, x in enumerate(self.xids):
            if x.tick > self.tick:
                break
            if registered.get(x.device, 0) & EVENT_XID:
                return i
        return None

    def c_nvmlEventSetWait_v2(self, es: Any, ref: Any, timeout_ms: Any) -> None:
        sid = _address(es)
        deadline = time.monotonic() + int(_val(timeout_ms)) / 1000
        with self._lock:
            shutdowns = self._shutdowns
            while True:
                if not self._installed:
                    raise _Fail(UNINITIALIZED)
                if sid not in self._sets:
                    raise _Fail(INVALID_ARGUMENT)
                i = self._due(sid)
                if i is not None:
                    x = self.xids.pop(i)
                    self.delivered.append(x)
                    break
                left = deadline - time.monotonic()
                # Once the library is shut down (the source closing), end the wait early: the
                # caller's loop then sees it should stop, as it would after the timeout.
                if left <= 0 or self._shutdowns != shutdowns:
                    raise _Fail(TIMEOUT)
                self._wake.wait(left)
        data = _out(ref)
        data.device = ctypes.cast(ctypes.c_void_p(_HANDLE_BASE + x.device),
                                  pynvml.c_nvmlDevice_t)
        data.eventType = EVENT_XID
        data.eventData = x.xid
        data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF

    # ------------------------------------------------------------------------------------------
    # GPM and process utilization

    def c_nvmlGpmQueryDeviceSupport(self, h: Any, ref: Any) -> None:
        d = self._dev(h)
        _out(ref).isSupportedDevice = int(not (isinstance(d.sm_active, Missing)
                                               and d.sm_active.reason == "unsupported"))

    def c_nvmlGpmSampleAlloc(self, ref: Any) -> None:
        sid = self._next_sample
        self._next_sample += 1
        self._gpm_samples[sid] = (-1, -1)
        _set_pointer(ref, sid)

    def c_nvmlGpmSampleFree(self, sample: Any) -> None:
        self._gpm_samples.pop(_address(sample), None)

    def c_nvmlGpmSampleGet(self, h: Any, sample: Any) -> None:
        self._dev(h)
        self._gpm_samples[_address(sample)] = (self._device_of(h), self.tick)

    def c_nvmlGpmMetricsGet(self, ref: Any) -> None:
        req = _out(ref)
        device, tick = self._gpm_samples[_address(req.sample2)]
        saved, self.tick = self.tick, tick
        try:
            handle = ctypes.cast(ctypes.c_void_p(_HANDLE_BASE + device), pynvml.c_nvmlDevice_t)
            for i in range(req.numMetrics):
                m = req.metrics[i]
                name = _GPM_FIELD.get(int(m.metricId))
                try:
                    if name is None:
                        raise _Fail(NOT_SUPPORTED)
                    value = float(self._get(handle, name))
                    m.value = value / (1 << 20) if name.startswith("pcie") else value
                    m.nvmlReturn = SUCCESS
                except _Fail as f:
                    m.nvmlReturn = f.code
        finally:
            self.tick = saved

    def c_nvmlDeviceGetProcessesUtilizationInfo(self, h: Any, ref: Any) -> int | None:
        info = _out(ref)
        busy = self._busy(h, info.lastSeenTimeStamp)
        if not info.procUtilArray or info.processSamplesCount < len(busy):
            info.processSamplesCount = len(busy)
            return INSUFFICIENT_SIZE
        self._fill_samples(info.procUtilArray, busy)
        info.processSamplesCount = len(busy)
        return None

    def c_nvmlDeviceGetProcessUtilization(self, h: Any, samples: Any, count_ref: Any,
                                          last_seen: Any) -> int | None:
        count = _out(count_ref)
        busy = self._busy(h, int(getattr(last_seen, "value", last_seen)))
        if not samples or count.value < len(busy):
            count.value = len(busy)
            return INSUFFICIENT_SIZE
        self._fill_samples(samples, busy)
        count.value = len(busy)
        return None

    def _busy(self, h: Any, last_seen: int) -> list[ProcessSample]:
        """The processes with a utilization sample since `last_seen` (µs): those that ran
        kernels this tick; NOT_FOUND when none did, as the driver answers."""
        busy = [p for p in self._procs(h, "compute") + self._procs(h, "graphics")
                if not isinstance(p.sm_util, Missing) and p.sm_util > 0]
        if last_seen >= int(self.snap.time * 1e6) or not busy:
            raise _Fail(NOT_FOUND)
        return busy

    def _fill_samples(self, array: Any, busy: list[ProcessSample]) -> None:
        ts = int(self.snap.time * 1e6)
        for i, p in enumerate(busy):
            s = array[i]
            s.pid, s.timeStamp = p.pid, ts
            s.smUtil = int(cast(float, p.sm_util))
            s.memUtil = 0 if isinstance(p.mem_util, Missing) else int(p.mem_util)


def _is_handle(x: Any) -> bool:
    return isinstance(x, pynvml.c_nvmlDevice_t)
