"""AMD GPUs through the `amdsmi` Python package (ROCm's amd-smi library, PyPI extra `amd`).

Every amdsmi call goes through `AmdSource._call`, which turns amdsmi's exceptions into gputop's
`CallError` kinds, once, here; `_ask` turns those into `Missing` reasons. A metric that answers
NOT_SUPPORTED or NO_PERM is not asked again. A GPU that answers NOT_FOUND is marked lost and not
polled again; the others keep updating.

Cadence:
- once at open: name, ids, max clocks, temperature thresholds, power caps, PCIe max link, ECC mode,
  NUMA node, the GPU-to-GPU topology matrix;
- every tick: activity, VRAM, power, energy, temperatures, clocks, fan, processes;
- every `slow_interval`: PCIe link and replays (amdsmi: "use this function once per 1000ms"),
  throttle reasons (violation status polls the driver twice, 100 ms apart), ECC counts and xGMI
  traffic.

Units from amdsmi 7.0.2: VRAM usage in MiB, power caps in µW (W on virtualization hosts), power in
W, temperatures in °C, clocks in MHz, PCIe speed in MT/s, xGMI counters in KB, process engine
time in ns.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import io
import os
from dataclasses import dataclass, field
from typing import Any

from gputop.errors import (
    BackendUnavailable,
    CallError,
    GpuLost,
    NoPermission,
    Transient,
    Unsupported,
)
from gputop.model import (
    PENDING,
    THROTTLE,
    UNSUPPORTED,
    DeviceSample,
    LinkSample,
    Missing,
    ProcessSample,
    Topology,
    build,
    mark_all,
)
from gputop.sources.base import GpuTick, SourceInfo

KFD = "/dev/kfd"
PCI_DEVICES = "/sys/bus/pci/devices"
AMD_PCI_VENDOR = "0x1002"  # ATI/AMD graphics; AMD CPUs and chipsets are 0x1022
MIB = 1 << 20
KIB = 1 << 10

# amdsmi_wrapper.AMDSMI_STATUS_* that gputop acts on, as 7.0.2 numbers them; the loaded
# package's own values win.
STATUS_7_0_2 = {
    "NOT_SUPPORTED": 2, "NOT_YET_IMPLEMENTED": 3, "FAIL_LOAD_MODULE": 4, "FAIL_LOAD_SYMBOL": 5,
    "TIMEOUT": 8, "RETRY": 9, "NO_PERM": 10, "INIT_ERROR": 18, "BUSY": 30, "NOT_FOUND": 31,
    "DRIVER_NOT_LOADED": 34,
}
_ERROR_KINDS: dict[str, type[CallError]] = {
    "NOT_SUPPORTED": Unsupported,
    "NOT_YET_IMPLEMENTED": Unsupported,
    "FAIL_LOAD_SYMBOL": Unsupported,  # this libamd_smi.so lacks the function
    "NO_PERM": NoPermission,
    "RETRY": Transient,
    "BUSY": Transient,
    "TIMEOUT": Transient,
    "NOT_FOUND": GpuLost,  # the device is gone from the driver's list
}
_INIT_ADVICE = {
    "DRIVER_NOT_LOADED": (
        "the amdgpu kernel driver is not loaded",
        "load it (sudo modprobe amdgpu) and check `dmesg` for why it did not load"),
    "FAIL_LOAD_MODULE": (
        "amdsmi could not load its library (libamd_smi.so)",
        "install ROCm's amd-smi-lib at the version of the amdsmi Python package"),
    "INIT_ERROR": (
        "amdsmi could not open the AMD GPUs",
        "check that /dev/kfd and /dev/dri/renderD* are readable: add your user to the 'render' "
        "and 'video' groups"),
    "NO_PERM": (
        "no permission to open the AMD GPUs (/dev/kfd, /dev/dri)",
        "add your user to the 'render' and 'video' groups"),
}

# The wrapper's placeholders for "no value" in fields it does not check itself.
_GAUGE_NONE = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
_SIZE_NONE = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})  # 65535 MiB is a real size
_COUNTER_NONE = frozenset({0xFFFFFFFFFFFFFFFF})
_PCIE_GEN_MTS = (2500, 5000, 8000, 16000, 32000, 64000)  # Gen1..Gen6

# amdsmi_get_violation_status active_* flags -> THROTTLE names. PPT (package power tracking) is
# the board power limit; socket, voltage-regulator and HBM thermal limits are all enforced by the
# firmware lowering clocks, which is what `sw_thermal` means on NVIDIA.
_VIOLATIONS = {
    "active_ppt_pwr": "board_limit",
    "active_socket_thrm": "sw_thermal",
    "active_vr_thrm": "sw_thermal",
    "active_hbm_thrm": "sw_thermal",
    "active_prochot_thrm": "prochot",
}

# Fields amdsmi has no counterpart for: unsupported from the start rather than pending forever.
_NOT_OFFERED = (
    "mem_reserved", "temp_max_operating", "pstate", "persistence_mode", "throttle_time",
    "pcie_rx", "pcie_tx", "enc_util", "dec_util", "remapped_corrected", "remapped_uncorrected",
    "remap_pending", "remap_failed", "mig_enabled", "gr_active", "sm_active", "sm_occupancy",
    "tensor_active", "dram_active", "cpu_affinity", "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate", "ecc_uncorrected_sram",
    "ecc_uncorrected_dram", "ecc_uncorrected_sram_aggregate", "ecc_uncorrected_dram_aggregate",
    "ecc_sram_threshold_exceeded", "retired_single_bit", "retired_double_bit", "retire_pending",
)


# ----------------------------------------------------------------------------------------------
# Loading amdsmi


def amd_gpu_present(kfd: str = KFD, pci_devices: str = PCI_DEVICES) -> bool:
    """True when the ROCm kernel interface exists or an AMD graphics device is on the PCI bus."""
    if os.path.exists(kfd):
        return True
    for path in glob.glob(os.path.join(pci_devices, "*", "vendor")):
        try:
            with open(path) as f:
                if f.read().strip().lower() == AMD_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def import_amdsmi() -> Any:
    """The amdsmi module, or BackendUnavailable. Only tried where an AMD GPU is present."""
    if not amd_gpu_present():
        raise BackendUnavailable("no AMD GPU found")
    # Without libamd_smi.so, `import amdsmi` prints to stdout and raises KeyError, not
    # ImportError; either would garble the terminal UI.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return importlib.import_module("amdsmi")
        except Exception as e:
            raise BackendUnavailable(
                "an AMD GPU is present but the amdsmi library cannot be loaded",
                hint="install ROCm's amd-smi-lib and `pip install gputop-ml[amd]` at the same "
                     "version") from e


# ----------------------------------------------------------------------------------------------
# Values: amdsmi answers "N/A" or all-ones for what a GPU lacks; each is cleaned once, where it
# is turned into a number or text.


def _clean(v: Any, none: frozenset[int]) -> Any:
    if v is None or (isinstance(v, str) and v.strip().upper().startswith("N/A")):
        return UNSUPPORTED
    if isinstance(v, int) and not isinstance(v, bool) and v in none:
        return UNSUPPORTED
    return v


def _get(d: Any, key: str) -> Any:
    """d[key]; a Missing `d` (the call failed) passes through."""
    if isinstance(d, Missing):
        return d
    if not isinstance(d, dict):
        return Missing("error", detail=f"unexpected answer {d!r}")
    return d.get(key)


def _num(v: Any, none: frozenset[int] = _GAUGE_NONE) -> Any:
    v = _clean(v, none)
    if isinstance(v, Missing):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return Missing("error", detail=f"not a number: {v!r}")
    return float(v)


def _int(v: Any, none: frozenset[int] = _GAUGE_NONE) -> Any:
    v = _clean(v, none)
    if isinstance(v, Missing):
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        return Missing("error", detail=f"not an integer: {v!r}")
    return v


def _text(v: Any) -> Any:
    v = _clean(v, frozenset())
    if isinstance(v, Missing):
        return v
    return v.strip() if isinstance(v, str) and v.strip() else UNSUPPORTED


def _missing(*values: Any) -> Missing | None:
    """The first Missing among `values`, if any."""
    return next((v for v in values if isinstance(v, Missing)), None)


def _first_present(*values: Any) -> Any:
    """The first value that is not Missing; else the first Missing."""
    return next((v for v in values if not isinstance(v, Missing)), values[0])


def _member(enum: Any, *names: str) -> Any:
    """The first of `names` that this amdsmi's enum has (members were renamed between
    releases, e.g. JUNCTION -> HOTSPOT)."""
    for name in names:
        member = getattr(enum, name, None)
        if member is not None:
            return member
    return None


def _watts_from_cap(v: Any) -> Any:
    """amdsmi power caps: µW on bare-metal Linux, W on virtualization hosts (amdsmi.h), and some
    ROCm 6 builds converted only some of the fields. No GPU cap is 100 kW, nor under 0.1 W."""
    w = _num(v, _COUNTER_NONE)
    if isinstance(w, Missing):
        return w
    if w <= 0:
        return Missing("unsupported", detail="no power cap reported")
    return w / 1e6 if w >= 100_000 else w


def _pcie_gen(speed: Any) -> Any:
    """PCIe generation from a link speed in MT/s (some builds give GT/s)."""
    mts = _num(speed)
    if isinstance(mts, Missing):
        return mts
    if 0 < mts < 100:
        mts *= 1000
    gens = [gen for gen, floor in enumerate(_PCIE_GEN_MTS, 1) if mts >= floor]
    return gens[-1] if gens else Missing("unsupported", detail=f"PCIe speed {mts:g} MT/s")


def _rate(prev: tuple[float, Any] | None, now: float, value: Any, scale: float) -> Any:
    """(value - previous) * scale / elapsed seconds, for cumulative counters."""
    if isinstance(value, Missing):
        return value
    if prev is None or isinstance(prev[1], Missing):
        return PENDING
    then, before = prev
    if now <= then or value < before:  # same instant, or the counter was reset
        return PENDING
    return (value - before) * scale / (now - then)


# ----------------------------------------------------------------------------------------------
# The source


@dataclass
class _Gpu:
    index: int
    handle: Any
    name: str = "AMD GPU"
    uuid: str = ""
    bdf: str = ""
    static: dict[str, Any] = field(default_factory=dict)  # DeviceSample fields read once
    slow: dict[str, Any] = field(default_factory=dict)  # DeviceSample fields of the slow tick
    off: dict[str, Missing] = field(default_factory=dict)  # calls not to make again
    lost: Missing | None = None
    temp_sensor: Any = None  # the sensor temp_gpu and its thresholds come from
    fan_max: float = 255.0  # AMDSMI_MAX_FAN_SPEED, "the denominator for fan speed percentage"
    links: list[LinkSample] = field(default_factory=list)
    link_prev: dict[tuple[int, str], tuple[float, Any]] = field(default_factory=dict)
    gfx_prev: dict[int, tuple[float, Any]] = field(default_factory=dict)  # pid -> (t, gfx ns)


class AmdSource:
    """GpuSource for AMD GPUs. `lib` is the amdsmi module; tests pass a fake."""

    name = "amdsmi"

    def __init__(self, lib: Any = None, *, slow_interval: float = 5.0) -> None:
        self._lib = lib
        self.slow_interval = slow_interval
        self.gpus: list[_Gpu] = []
        self.topology: Topology | None = None
        self._status: dict[int, str] = {}
        self._last_slow = float("-inf")
        self._open = False

    # ------------------------------------------------------------------------------------------
    # open / close

    def open(self) -> SourceInfo:
        if self._lib is None:
            self._lib = import_amdsmi()
        wrapper = getattr(self._lib, "amdsmi_wrapper", None)
        self._status = {int(getattr(wrapper, f"AMDSMI_STATUS_{name}", code)): name
                        for name, code in STATUS_7_0_2.items()}
        self._init()
        try:
            handles = self._call("amdsmi_get_processor_handles")
        except CallError as e:
            self.close()
            raise BackendUnavailable(f"amdsmi could not list the GPUs ({e})", priority=1) from e
        if not handles:
            self.close()
            raise BackendUnavailable("amdsmi lists no AMD GPU",
                                     hint="the driver is loaded but amdsmi sees no GPU")
        self.gpus = [self._discover(i, h) for i, h in enumerate(handles)]
        self.topology = self._read_topology()
        return self._info()

    def _init(self) -> None:
        lib = self._lib
        try:
            lib.amdsmi_init(lib.AmdSmiInitFlags.INIT_AMD_GPUS)
        except lib.AmdSmiLibraryException as e:
            status, text = self._status_of(e)
            message, hint = _INIT_ADVICE.get(status, (
                f"amdsmi failed to start ({text})",
                "run `amd-smi list` to see whether ROCm sees the GPUs"))
            raise BackendUnavailable(message, hint=hint, priority=1) from e
        except Exception as e:
            raise BackendUnavailable(f"amdsmi failed to start ({e})", priority=1) from e
        self._open = True

    def _info(self) -> SourceInfo:
        info = SourceInfo(backend="amdsmi")
        for gpu in self.gpus:
            if gpu.lost is not None:
                continue
            try:
                driver = _text(_get(self._ask(gpu, "amdsmi_get_gpu_driver_info"),
                                    "driver_version"))
            except GpuLost:
                continue
            if isinstance(driver, str):
                info.driver_version = driver
                break
        try:  # (found, "6.4.1") from librocm-core.so, which a pip-only install lacks
            found, version = self._call("amdsmi_get_rocm_version")
        except CallError:
            found, version = False, ""
        info.rocm_version = str(version) if found else None
        return info

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(CallError):  # closing must not mask why we close
            self._call("amdsmi_shut_down")

    # ------------------------------------------------------------------------------------------
    # the one place amdsmi errors are translated

    def _status_of(self, e: Any) -> tuple[str, str]:
        """("NOT_SUPPORTED", "AMDSMI_STATUS_NOT_SUPPORTED") for an AmdSmiLibraryException; its
        `err_code` and `err_info` are the documented attributes."""
        code = abs(int(e.err_code))
        text = str(getattr(e, "err_info", "") or f"amdsmi status {code}").split(" - ")[0]
        return self._status.get(code, ""), text

    def _call(self, fn: str, *args: Any) -> Any:
        lib = self._lib
        func = getattr(lib, fn, None)
        if func is None:
            raise Unsupported(f"{fn} is not in this amdsmi")
        try:
            return func(*args)
        except lib.AmdSmiLibraryException as e:
            status, text = self._status_of(e)
            raise _ERROR_KINDS.get(status, CallError)(f"{fn}: {text}") from e
        except AttributeError as e:  # a symbol missing from an older libamd_smi.so
            raise Unsupported(f"{fn}: {e}") from e
        except Exception as e:  # AmdSmiParameterException, ctypes errors: this call only
            raise CallError(f"{fn}: {e}") from e

    def _ask(self, gpu: _Gpu, fn: str, *args: Any) -> Any:
        """amdsmi `fn` for this GPU: its answer, or a Missing. Raises GpuLost."""
        key = ":".join([fn, *(getattr(a, "name", str(a)) for a in args)])
        if key in gpu.off:
            return gpu.off[key]
        try:
            return self._call(fn, gpu.handle, *args)
        except (Unsupported, NoPermission) as e:
            gpu.off[key] = Missing(e.reason, detail=str(e))
            return gpu.off[key]
        except GpuLost:
            raise
        except CallError as e:  # busy, timeout, retry, anything else: try again next tick
            return Missing("error", detail=str(e))

    # ------------------------------------------------------------------------------------------
    # static facts

    def _discover(self, index: int, handle: Any) -> _Gpu:
        gpu = _Gpu(index, handle)
        try:
            gpu.bdf = _first_present(_text(self._ask(gpu, "amdsmi_get_gpu_device_bdf")), "")
            gpu.uuid = _first_present(_text(self._ask(gpu, "amdsmi_get_gpu_device_uuid")), "")
            asic = self._ask(gpu, "amdsmi_get_gpu_asic_info")
            gpu.name = _first_present(
                _text(_get(asic, "market_name")),
                _text(_get(self._ask(gpu, "amdsmi_get_gpu_board_info"), "product_name")),
                "AMD GPU")
            gpu.static = self._read_static(gpu, asic)
        except GpuLost as e:
            gpu.lost = Missing("gpu_lost", detail=str(e))
        return gpu

    def _read_static(self, gpu: _Gpu, asic: Any) -> dict[str, Any]:
        clk = self._lib.AmdSmiClkType
        s: dict[str, Any] = dict.fromkeys(_NOT_OFFERED, UNSUPPORTED)
        s["compute_capability"] = _text(_get(asic, "target_graphics_version"))  # "gfx90a"
        s["clock_sm_max"] = _int(_get(self._ask(gpu, "amdsmi_get_clock_info", clk.GFX), "max_clk"))
        s["clock_mem_max"] = _int(_get(self._ask(gpu, "amdsmi_get_clock_info", clk.MEM),
                                       "max_clk"))
        s.update(self._thresholds(gpu))
        caps = self._ask(gpu, "amdsmi_get_power_cap_info")
        s["power_limit"] = _watts_from_cap(_get(caps, "power_cap"))
        s["power_default_limit"] = _watts_from_cap(_get(caps, "default_power_cap"))
        pcie = _get(self._ask(gpu, "amdsmi_get_pcie_info"), "pcie_static")
        s["pcie_gen_max"] = _first_present(_pcie_gen(_get(pcie, "max_pcie_speed")),
                                           _int(_get(pcie, "pcie_interface_version")))
        s["pcie_width_max"] = _int(_get(pcie, "max_pcie_width"))
        blocks = _int(self._ask(gpu, "amdsmi_get_gpu_ecc_enabled"), _COUNTER_NONE)  # bitmask
        s["ecc_enabled"] = blocks if isinstance(blocks, Missing) else blocks != 0
        s["numa_node"] = _int(self._ask(gpu, "amdsmi_topo_get_numa_node_number"))
        fan_max = _num(self._ask(gpu, "amdsmi_get_gpu_fan_speed_max", 0))
        if not isinstance(fan_max, Missing) and fan_max > 0:
            gpu.fan_max = fan_max
        return s

    def _thresholds(self, gpu: _Gpu) -> dict[str, Any]:
        """Slowdown (CRITICAL) and shutdown (EMERGENCY) of the sensor temp_gpu reads. The
        hotspot (junction) is preferred, as the hottest point of the die; temperature and
        thresholds come from the same sensor so that the margin compares like with like."""
        kinds, metric = self._lib.AmdSmiTemperatureType, self._lib.AmdSmiTemperatureMetric
        for sensor in (_member(kinds, "HOTSPOT", "JUNCTION"), _member(kinds, "EDGE")):
            if sensor is None:
                continue
            now = _num(self._ask(gpu, "amdsmi_get_temp_metric", sensor, metric.CURRENT))
            if not isinstance(now, Missing):
                gpu.temp_sensor = sensor
                return {
                    "temp_slowdown": _num(self._ask(gpu, "amdsmi_get_temp_metric", sensor,
                                                    metric.CRITICAL)),
                    "temp_shutdown": _num(self._ask(gpu, "amdsmi_get_temp_metric", sensor,
                                                    metric.EMERGENCY)),
                }
        return {"temp_slowdown": UNSUPPORTED, "temp_shutdown": UNSUPPORTED}

    def _read_topology(self) -> Topology | None:
        gpus = [g for g in self.gpus if g.lost is None]
        if not gpus:
            return None
        rows = [["X" if a is b else "" for b in gpus] for a in gpus]
        for i, a in enumerate(gpus):
            for j in range(i + 1, len(gpus)):
                rows[i][j] = rows[j][i] = self._pair_label(a, gpus[j])
        numa = [g.static.get("numa_node") for g in gpus]
        return Topology(matrix=tuple(tuple(r) for r in rows),
                        numa_affinity=tuple(str(n) if isinstance(n, int) else "" for n in numa))

    def _pair_label(self, a: _Gpu, b: _Gpu) -> str:
        try:
            link = self._call("amdsmi_topo_get_link_type", a.handle, b.handle)
        except CallError:
            return "?"
        kinds = self._lib.AmdSmiLinkType
        if link.get("type") == kinds.AMDSMI_LINK_TYPE_XGMI:
            return "XGMI"
        if link.get("type") != kinds.AMDSMI_LINK_TYPE_PCIE:
            return "?"
        # KFD counts the CPU as a hop: GPU-CPU-GPU is 2 within a socket, 3 or more across the
        # socket interconnect. amdsmi does not see PCIe switches, so PIX/PXB/PHB cannot be told
        # apart: "within a NUMA node" is all that can be said.
        numa_a, numa_b = a.static.get("numa_node"), b.static.get("numa_node")
        if isinstance(numa_a, int) and isinstance(numa_b, int) and numa_a != numa_b:
            return "SYS"
        hops = link.get("hops")
        return "SYS" if isinstance(hops, int) and hops >= 3 else "NODE"

    # ------------------------------------------------------------------------------------------
    # polling

    def poll(self, now: float) -> GpuTick:
        if not self._open:
            raise RuntimeError("AmdSource.poll() before open()")
        tick = GpuTick(topology=self.topology)
        slow = now - self._last_slow >= self.slow_interval
        if slow:
            self._last_slow = now
        for gpu in self.gpus:
            if gpu.lost is None:
                try:
                    if slow:
                        self._poll_slow(gpu, now)
                    sample = self._sample(gpu)
                    processes = self._processes(gpu, now)
                except GpuLost as e:
                    gpu.lost = Missing("gpu_lost", since=now, detail=str(e))
                    tick.warnings.append(
                        f"GPU {gpu.index} ({gpu.name}, {gpu.bdf}) stopped answering amdsmi: {e}; "
                        "the other GPUs keep updating")
                else:
                    tick.devices.append(sample)
                    tick.processes += processes
                    tick.links += gpu.links
                    continue
            tick.devices.append(self._lost_sample(gpu))
        return tick

    def _lost_sample(self, gpu: _Gpu) -> DeviceSample:
        assert gpu.lost is not None
        base = DeviceSample(index=gpu.index, vendor="amd", name=gpu.name, uuid=gpu.uuid,
                            pci_bus_id=gpu.bdf, lost=gpu.lost)
        return mark_all(base, Missing("gpu_lost", since=gpu.lost.since))

    def _sample(self, gpu: _Gpu) -> DeviceSample:
        clk = self._lib.AmdSmiClkType
        f: dict[str, Any] = {**gpu.static, **gpu.slow}
        activity = self._ask(gpu, "amdsmi_get_gpu_activity")
        f["util_gpu"] = _num(_get(activity, "gfx_activity"))
        f["util_mem"] = _num(_get(activity, "umc_activity"))
        f.update(self._memory(gpu))
        power = self._ask(gpu, "amdsmi_get_power_info")
        # socket_power is whichever of current/average the ASIC has (current on MI300).
        f["power_draw"] = _first_present(*(_num(_get(power, k)) for k in (
            "socket_power", "average_socket_power", "current_socket_power")))
        f["energy_j"] = self._energy(gpu)
        f.update(self._temperatures(gpu, f["temp_slowdown"]))
        f["clock_sm"] = _int(_get(self._ask(gpu, "amdsmi_get_clock_info", clk.GFX), "clk"))
        f["clock_mem"] = _int(_get(self._ask(gpu, "amdsmi_get_clock_info", clk.MEM), "clk"))
        speed = _num(self._ask(gpu, "amdsmi_get_gpu_fan_speed", 0))
        f["fan"] = speed if isinstance(speed, Missing) else round(speed / gpu.fan_max * 100, 1)
        f["xid_count"] = Missing("unsupported", detail="Xid events are NVIDIA's")
        f.update(index=gpu.index, vendor="amd", name=gpu.name, uuid=gpu.uuid,
                 pci_bus_id=gpu.bdf)
        return build(DeviceSample, f)

    def _memory(self, gpu: _Gpu) -> dict[str, Any]:
        vram = self._ask(gpu, "amdsmi_get_gpu_vram_usage")  # MiB
        total = _int(_get(vram, "vram_total"), _SIZE_NONE)
        used = _int(_get(vram, "vram_used"), _SIZE_NONE)
        why = _missing(total, used)
        return {
            "mem_total": total if isinstance(total, Missing) else total * MIB,
            "mem_used": used if isinstance(used, Missing) else used * MIB,
            "mem_free": why if why is not None else (total - used) * MIB,
        }

    def _energy(self, gpu: _Gpu) -> Any:
        energy = self._ask(gpu, "amdsmi_get_energy_count")
        count = _int(_get(energy, "energy_accumulator"), _COUNTER_NONE)
        resolution = _num(_get(energy, "counter_resolution"))  # µJ per count
        why = _missing(count, resolution)
        return why if why is not None else count * resolution / 1e6

    def _temperatures(self, gpu: _Gpu, slowdown: Any) -> dict[str, Any]:
        kinds, current = self._lib.AmdSmiTemperatureType, self._lib.AmdSmiTemperatureMetric.CURRENT
        temp: Any = UNSUPPORTED
        if gpu.temp_sensor is not None:
            temp = _num(self._ask(gpu, "amdsmi_get_temp_metric", gpu.temp_sensor, current))
        memory = _num(self._ask(gpu, "amdsmi_get_temp_metric", kinds.VRAM, current))
        why = _missing(temp, slowdown)
        return {"temp_gpu": temp, "temp_mem": memory,
                "temp_margin": why if why is not None else slowdown - temp}

    def _processes(self, gpu: _Gpu, now: float) -> list[ProcessSample]:
        procs = self._ask(gpu, "amdsmi_get_gpu_process_list")
        if isinstance(procs, Missing):
            return []
        out: list[ProcessSample] = []
        seen: dict[int, tuple[float, Any]] = {}
        for p in procs:
            pid = int(p["pid"])
            gfx = _int(_get(p.get("engine_usage"), "gfx"), _COUNTER_NONE)  # ns, cumulative
            busy = _rate(gpu.gfx_prev.get(pid), now, gfx, 100 / 1e9)  # ns per s -> %
            if not isinstance(busy, Missing):
                busy = min(busy, 100.0)  # engine time summed over several XCDs may exceed wall time
            seen[pid] = (now, gfx)
            out.append(ProcessSample(
                pid=pid, device_index=gpu.index, kind="compute",
                gpu_mem=_int(p.get("mem"), _COUNTER_NONE), sm_util=busy, mem_util=UNSUPPORTED))
        gpu.gfx_prev = seen  # forget processes that ended
        return out

    # ------------------------------------------------------------------------------------------
    # slow tick

    def _poll_slow(self, gpu: _Gpu, now: float) -> None:
        s = gpu.slow
        pcie = _get(self._ask(gpu, "amdsmi_get_pcie_info"), "pcie_metric")
        s["pcie_gen"] = _pcie_gen(_get(pcie, "pcie_speed"))
        s["pcie_width"] = _int(_get(pcie, "pcie_width"))
        s["pcie_replays"] = _int(_get(pcie, "pcie_replay_count"), _COUNTER_NONE)
        s["throttle"] = self._throttle(gpu)
        ecc = self._ask(gpu, "amdsmi_get_gpu_total_ecc_count")
        s["ecc_corrected"] = _int(_get(ecc, "correctable_count"), _COUNTER_NONE)
        s["ecc_uncorrected"] = _int(_get(ecc, "uncorrectable_count"), _COUNTER_NONE)
        gpu.links = self._links(gpu, now)

    def _throttle(self, gpu: _Gpu) -> Any:
        violations = self._ask(gpu, "amdsmi_get_violation_status")  # MI300 and newer
        if isinstance(violations, dict):
            active = {name for key, name in _VIOLATIONS.items() if violations.get(key) is True}
            return tuple(name for name in THROTTLE if name in active)
        if isinstance(violations, Missing) and violations.reason == "error":
            return violations
        # Older GPUs: gpu_metrics has the throttler bitmask, but the Python wrapper turns it into
        # a bool. "Not throttled" is then an honest empty set; "throttled" has no known reason,
        # and naming one (say board_limit) would be a guess.
        flag = _clean(_get(self._ask(gpu, "amdsmi_get_gpu_metrics_info"), "throttle_status"),
                      frozenset())
        if isinstance(flag, Missing):
            return flag
        if flag is False:
            return ()
        if flag is True:
            return Missing("unsupported", detail="throttled, but this amdsmi does not say why")
        return Missing("error", detail=f"throttle_status {flag!r}")

    def _links(self, gpu: _Gpu, now: float) -> list[LinkSample]:
        metrics = self._ask(gpu, "amdsmi_get_link_metrics")
        count = _int(_get(metrics, "num_links"))
        if isinstance(count, Missing):
            return []
        xgmi = self._lib.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI
        return [self._link(gpu, i, link, now)
                for i, link in enumerate(metrics.get("links", [])[:count])
                if link.get("link_type") == xgmi]

    def _link(self, gpu: _Gpu, i: int, link: dict[str, Any], now: float) -> LinkSample:
        rates = {}
        for key in ("read", "write"):  # KB moved since the driver loaded
            value = _int(link.get(key), _COUNTER_NONE)
            rates[key] = _rate(gpu.link_prev.get((i, key)), now, value, KIB)
            gpu.link_prev[(i, key)] = (now, value)
        gbps = _num(link.get("bit_rate"))  # current link speed, Gb/s
        remote = _text(link.get("bdf"))
        return LinkSample(
            device_index=gpu.index, link=i, kind="xgmi",
            up=gbps if isinstance(gbps, Missing) else gbps > 0,  # 7.0.2 has no link status
            version=UNSUPPORTED,
            remote_bus_id=remote,
            remote_kind=remote if isinstance(remote, Missing) else (
                "gpu" if remote in {g.bdf for g in self.gpus} else "unknown"),
            speed=gbps if isinstance(gbps, Missing) else gbps * 1e9 / 8,
            rx=rates["read"], tx=rates["write"], errors=UNSUPPORTED)
