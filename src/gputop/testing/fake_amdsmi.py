"""A stand-in for the `amdsmi` Python package (7.0.2), driven by recorded data.

`FakeAmdSmi` answers the calls gputop makes with the same return shapes as amdsmi 7.0.2's
`amdsmi_interface.py` (dicts with the same keys, "N/A" strings where the wrapper puts them), raises
the same exception classes with the same status codes, and counts every call so a test can check
what was asked and how often. It never imports amdsmi.

A fixture (fixtures/amd/*.json) holds:

- "devices": one inventory per GPU, keyed by amdsmi function name, each value what that function
  returns. Functions that take a selector are keyed one level deeper by the enum member name
  (`amdsmi_get_clock_info` -> "GFX"/"MEM"; `amdsmi_get_temp_metric` -> "EDGE" -> "CRITICAL") or
  by the sensor index (`amdsmi_get_gpu_fan_speed` -> "0"). A missing entry answers
  AMDSMI_STATUS_NOT_SUPPORTED, as the library does for a sensor the GPU lacks.
  `{"__raise__": "AMDSMI_STATUS_NOT_SUPPORTED"}` in place of a value makes that call raise.
- "library": answers of calls that take no GPU (`amdsmi_get_rocm_version`, ...).
- "amdsmi_topo_get_link_type": {"0,1": {"hops": 2, "type": "AMDSMI_LINK_TYPE_PCIE"}, ...}.
  Link types are written by enum member name and returned as the fake enum's integer, so a
  test can renumber the enum (amdsmi has reordered it between releases).
- "ticks": a list, one entry per tick, of per-device overrides in the inventory's shape; dicts are
  merged into the inventory, other values replace it. `advance()` moves to the next tick; past
  the last one, the last stays in effect.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

__version__ = "7.0.2"

# amdsmi_wrapper.AMDSMI_STATUS_* (7.0.2).
STATUS: dict[str, int] = {
    "AMDSMI_STATUS_SUCCESS": 0,
    "AMDSMI_STATUS_INVAL": 1,
    "AMDSMI_STATUS_NOT_SUPPORTED": 2,
    "AMDSMI_STATUS_NOT_YET_IMPLEMENTED": 3,
    "AMDSMI_STATUS_FAIL_LOAD_MODULE": 4,
    "AMDSMI_STATUS_FAIL_LOAD_SYMBOL": 5,
    "AMDSMI_STATUS_DRM_ERROR": 6,
    "AMDSMI_STATUS_API_FAILED": 7,
    "AMDSMI_STATUS_TIMEOUT": 8,
    "AMDSMI_STATUS_RETRY": 9,
    "AMDSMI_STATUS_NO_PERM": 10,
    "AMDSMI_STATUS_INTERRUPT": 11,
    "AMDSMI_STATUS_IO": 12,
    "AMDSMI_STATUS_ADDRESS_FAULT": 13,
    "AMDSMI_STATUS_FILE_ERROR": 14,
    "AMDSMI_STATUS_OUT_OF_RESOURCES": 15,
    "AMDSMI_STATUS_INTERNAL_EXCEPTION": 16,
    "AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS": 17,
    "AMDSMI_STATUS_INIT_ERROR": 18,
    "AMDSMI_STATUS_REFCOUNT_OVERFLOW": 19,
    "AMDSMI_STATUS_DIRECTORY_NOT_FOUND": 20,
    "AMDSMI_STATUS_BUSY": 30,
    "AMDSMI_STATUS_NOT_FOUND": 31,
    "AMDSMI_STATUS_NOT_INIT": 32,
    "AMDSMI_STATUS_NO_SLOT": 33,
    "AMDSMI_STATUS_DRIVER_NOT_LOADED": 34,
    "AMDSMI_STATUS_MORE_DATA": 39,
    "AMDSMI_STATUS_NO_DATA": 40,
    "AMDSMI_STATUS_INSUFFICIENT_SIZE": 41,
    "AMDSMI_STATUS_UNEXPECTED_SIZE": 42,
    "AMDSMI_STATUS_UNEXPECTED_DATA": 43,
    "AMDSMI_STATUS_MAP_ERROR": 0xFFFFFFFE,
    "AMDSMI_STATUS_UNKNOWN_ERROR": 0xFFFFFFFF,
}
_STATUS_NAMES = {code: name for name, code in STATUS.items()}

# `amdsmi.amdsmi_wrapper`, where the real package keeps its status constants.
amdsmi_wrapper = SimpleNamespace(**STATUS)

AMDSMI_MAX_NUM_XGMI_LINKS = 8  # amdsmi_get_link_metrics always returns this many entries


# ----------------------------------------------------------------------------------------------
# Exceptions: amdsmi_exception.py


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _STATUS_NAMES.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(STATUS["AMDSMI_STATUS_RETRY"])


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(STATUS["AMDSMI_STATUS_TIMEOUT"])


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.actualType = type(receivedValue)
        self.expectedType = expectedType
        self.err_msg = msg or (f"Invalid parameter:\nActual type: {self.actualType}\n"
                               f"Expected type: {expectedType}")

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiKeyException(AmdSmiException):
    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def __str__(self) -> str:
        return f"Key {self.key} is missing from dictionary"


class AmdSmiBdfFormatException(AmdSmiException):
    def __init__(self, bdf: str) -> None:
        super().__init__()
        self.bdf = bdf

    def __str__(self) -> str:
        return f"Wrong BDF format: {self.bdf}"


def _raise_status(code: int) -> None:
    """What amdsmi_interface._check_res raises for a status code."""
    if code == STATUS["AMDSMI_STATUS_RETRY"]:
        raise AmdSmiRetryException()
    if code == STATUS["AMDSMI_STATUS_TIMEOUT"]:
        raise AmdSmiTimeoutException()
    raise AmdSmiLibraryException(code)


def status_code(status: str | int) -> int:
    """"AMDSMI_STATUS_BUSY", "BUSY" or 30 -> 30."""
    if isinstance(status, int):
        return status
    return STATUS[status if status.startswith("AMDSMI_STATUS_") else f"AMDSMI_STATUS_{status}"]


# ----------------------------------------------------------------------------------------------
# Enums (amdsmi_interface.py, values of 7.0.2). Where amdsmi has aliases (GFX = SYS,
# HOTSPOT = JUNCTION), the name fixtures use comes first so that it is the member's `.name`.


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8
    INIT_AMD_APUS = 3


class AmdSmiClkType(IntEnum):
    GFX = 0
    SYS = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6
    EMERGENCY = 7
    EMERGENCY_HYST = 8
    CRIT_MIN = 9
    CRIT_MIN_HYST = 10
    OFFSET = 11
    LOWEST = 12
    HIGHEST = 13


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


LINK_TYPES_7_0_2 = {
    "AMDSMI_LINK_TYPE_INTERNAL": 0,
    "AMDSMI_LINK_TYPE_PCIE": 1,
    "AMDSMI_LINK_TYPE_XGMI": 2,
    "AMDSMI_LINK_TYPE_NOT_APPLICABLE": 3,
    "AMDSMI_LINK_TYPE_UNKNOWN": 4,
}
# An earlier amdsmi.h had no INTERNAL member, so PCIE was 0 and XGMI 1: code that compares link
# types with numbers is wrong under one of the two numberings.
LINK_TYPES_WITHOUT_INTERNAL = {
    "AMDSMI_LINK_TYPE_PCIE": 0,
    "AMDSMI_LINK_TYPE_XGMI": 1,
    "AMDSMI_LINK_TYPE_NOT_APPLICABLE": 2,
    "AMDSMI_LINK_TYPE_UNKNOWN": 3,
}


# ----------------------------------------------------------------------------------------------
# Answers too long to write in a fixture

_VIOLATIONS = ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm",
               "gfx_clk_below_host_limit")
_VIOLATIONS_PER_XCP = ("gfx_clk_below_host_limit_pwr", "gfx_clk_below_host_limit_thm",
                       "gfx_clk_below_host_limit_total", "low_utilization")


def violation_status(active: Sequence[str] = (), percent: Mapping[str, int] | None = None,
                     *, partitions: int = 8, xccs: int = 8) -> dict[str, Any]:
    """amdsmi_get_violation_status's answer (MI300 and newer) in 7.0.2's shape, with the
    `active_<kind>` flags named in `active` (e.g. "ppt_pwr", "socket_thrm") set. Per-partition
    lists are all "N/A", as on a GPU that is not partitioned."""
    percent = percent or {}
    out: dict[str, Any] = {"reference_timestamp": 1_700_000_000_000_000,
                           "violation_timestamp": 100_000, "acc_counter": 1_000}
    for prefix in ("acc", "per", "active"):
        for kind in _VIOLATIONS:
            out[f"{prefix}_{kind}"] = {"acc": 10 * percent.get(kind, 0),
                                       "per": percent.get(kind, 0),
                                       "active": kind in active}[prefix]
        for kind in _VIOLATIONS_PER_XCP:
            out[f"{prefix}_{kind}"] = [["N/A"] * xccs for _ in range(partitions)]
    return out


# ----------------------------------------------------------------------------------------------
# The fake library


@dataclass(frozen=True)
class FakeHandle:
    """A processor handle (the real one is a ctypes pointer)."""

    index: int


@dataclass(frozen=True)
class _Fault:
    fn: str | None  # None: every call for the device
    code: int
    device: int | None
    from_tick: int
    until_tick: int | None

    def hits(self, fn: str, device: int | None, tick: int) -> bool:
        return ((self.fn is None or self.fn == fn)
                and (self.device is None or self.device == device)
                and self.from_tick <= tick
                and (self.until_tick is None or tick < self.until_tick))


_ABSENT = object()


def _merge(base: Any, override: Any) -> Any:
    """`override` over `base`: dicts key by key, anything else (and a recorded error) replaced."""
    mergeable = isinstance(base, dict) and isinstance(override, dict)
    if mergeable and "__raise__" not in base and "__raise__" not in override:
        out = dict(base)
        for k, v in override.items():
            out[k] = _merge(base.get(k, _ABSENT), v)
        return out
    return override


def _device_call(fn: str) -> Callable[[FakeAmdSmi, FakeHandle], Any]:
    def call(self: FakeAmdSmi, processor_handle: FakeHandle) -> Any:
        return self._answer(fn, processor_handle)

    call.__name__ = fn
    return call


# The enums by names the class below does not shadow (it carries them as amdsmi does).
_InitFlags = AmdSmiInitFlags
_ClkType = AmdSmiClkType
_TemperatureType = AmdSmiTemperatureType
_TemperatureMetric = AmdSmiTemperatureMetric


class FakeAmdSmi:
    """Use it where gputop takes the `amdsmi` module: `AmdSource(lib=FakeAmdSmi.load(path))`."""

    __version__ = __version__
    amdsmi_wrapper = amdsmi_wrapper
    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiRetryException = AmdSmiRetryException
    AmdSmiTimeoutException = AmdSmiTimeoutException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiKeyException = AmdSmiKeyException
    AmdSmiBdfFormatException = AmdSmiBdfFormatException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiClkType = AmdSmiClkType
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiMemoryType = AmdSmiMemoryType

    def __init__(self, fixture: Mapping[str, Any], *,
                 link_types: Mapping[str, int] = LINK_TYPES_7_0_2) -> None:
        self.AmdSmiLinkType = IntEnum("AmdSmiLinkType", dict(link_types))  # type: ignore[misc]
        self.fixture = copy.deepcopy(dict(fixture))
        self.devices: list[dict[str, Any]] = self.fixture["devices"]
        self.ticks: list[list[dict[str, Any]]] = self.fixture.get("ticks") or []
        self.tick = 0
        self.calls: Counter[tuple[str, int | None]] = Counter()
        self.initialized = False
        self._faults: list[_Fault] = []
        self._init_failure: int | None = None
        self._scripts: dict[tuple[int, str], list[Any]] = {}

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> FakeAmdSmi:
        return cls(json.loads(Path(path).read_text()), **kwargs)

    # -- driving the fake ------------------------------------------------------------------------

    def advance(self, ticks: int = 1) -> None:
        """Moves to the next recorded tick."""
        self.tick += ticks

    def set(self, device: int, fn: str, value: Any) -> None:
        """Replaces what `fn` answers for `device` on every tick."""
        self.devices[device][fn] = value

    def script(self, device: int, fn: str, values: Sequence[Any]) -> None:
        """What `fn` answers for `device`, tick by tick (the last value holds after the end).
        Merged over the inventory like a recorded tick."""
        self._scripts[(device, fn)] = list(values)

    def set_link(self, a: int, b: int, *, hops: int, link_type: str) -> None:
        """The answer of amdsmi_topo_get_link_type between GPUs a and b (both ways)."""
        links = self.fixture.setdefault("amdsmi_topo_get_link_type", {})
        links[f"{min(a, b)},{max(a, b)}"] = {"hops": hops, "type": link_type}

    def inject(self, fn: str | None, status: str | int, *, device: int | None = None,
               from_tick: int = 0, until_tick: int | None = None) -> None:
        """Makes `fn` (None: every call) raise `status` for `device` (None: every device), from
        tick `from_tick` up to, not including, `until_tick`."""
        self._faults.append(_Fault(fn, status_code(status), device, from_tick, until_tick))

    def lose_device(self, device: int, *, from_tick: int) -> None:
        """The GPU falls off the bus: from that tick on, every call for it answers NOT_FOUND."""
        self.inject(None, "AMDSMI_STATUS_NOT_FOUND", device=device, from_tick=from_tick)

    def fail_init(self, status: str | int) -> None:
        self._init_failure = status_code(status)

    def count(self, fn: str, device: int | None = None) -> int:
        """How many times `fn` was called (for one device, or in all)."""
        return sum(n for (f, d), n in self.calls.items()
                   if f == fn and (device is None or d == device))

    # -- amdsmi: library ---------------------------------------------------------------------------

    def amdsmi_init(self, flag: _InitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.calls[("amdsmi_init", None)] += 1
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        if self._init_failure is not None:
            _raise_status(self._init_failure)
        self.initialized = True

    def amdsmi_shut_down(self) -> None:
        self.calls[("amdsmi_shut_down", None)] += 1
        self._check_init()
        self.initialized = False

    def amdsmi_get_processor_handles(self) -> list[FakeHandle]:
        self.calls[("amdsmi_get_processor_handles", None)] += 1
        self._check_init()
        return [FakeHandle(i) for i in range(len(self.devices))]

    def amdsmi_get_rocm_version(self) -> tuple[bool, str]:
        self.calls[("amdsmi_get_rocm_version", None)] += 1
        ok, text = self.fixture.get("library", {}).get(
            "amdsmi_get_rocm_version", (False, "Could not find librocm-core.so"))
        return bool(ok), str(text)

    # -- amdsmi: per GPU ---------------------------------------------------------------------------

    amdsmi_get_gpu_device_bdf = _device_call("amdsmi_get_gpu_device_bdf")
    amdsmi_get_gpu_device_uuid = _device_call("amdsmi_get_gpu_device_uuid")
    amdsmi_get_gpu_asic_info = _device_call("amdsmi_get_gpu_asic_info")
    amdsmi_get_gpu_board_info = _device_call("amdsmi_get_gpu_board_info")
    amdsmi_get_gpu_driver_info = _device_call("amdsmi_get_gpu_driver_info")
    amdsmi_get_power_cap_info = _device_call("amdsmi_get_power_cap_info")
    amdsmi_get_gpu_activity = _device_call("amdsmi_get_gpu_activity")
    amdsmi_get_gpu_vram_usage = _device_call("amdsmi_get_gpu_vram_usage")
    amdsmi_get_power_info = _device_call("amdsmi_get_power_info")
    amdsmi_get_energy_count = _device_call("amdsmi_get_energy_count")
    amdsmi_get_pcie_info = _device_call("amdsmi_get_pcie_info")
    amdsmi_get_gpu_total_ecc_count = _device_call("amdsmi_get_gpu_total_ecc_count")
    amdsmi_get_gpu_ecc_enabled = _device_call("amdsmi_get_gpu_ecc_enabled")
    amdsmi_get_gpu_process_list = _device_call("amdsmi_get_gpu_process_list")
    amdsmi_get_violation_status = _device_call("amdsmi_get_violation_status")
    amdsmi_get_gpu_metrics_info = _device_call("amdsmi_get_gpu_metrics_info")
    amdsmi_topo_get_numa_node_number = _device_call("amdsmi_topo_get_numa_node_number")

    def amdsmi_get_clock_info(self, processor_handle: FakeHandle,
                              clock_type: _ClkType) -> dict[str, Any]:
        self._check_enum(clock_type, AmdSmiClkType)
        return cast("dict[str, Any]",
                    self._answer("amdsmi_get_clock_info", processor_handle, clock_type.name))

    def amdsmi_get_temp_metric(self, processor_handle: FakeHandle,
                               sensor_type: _TemperatureType,
                               metric: _TemperatureMetric) -> int:
        self._check_enum(sensor_type, AmdSmiTemperatureType)
        self._check_enum(metric, AmdSmiTemperatureMetric)
        return cast(int, self._answer("amdsmi_get_temp_metric", processor_handle,
                                      sensor_type.name, metric.name))

    def amdsmi_get_gpu_fan_speed(self, processor_handle: FakeHandle, sensor_idx: int) -> int:
        self._check_enum(sensor_idx, int)
        return cast(int, self._answer("amdsmi_get_gpu_fan_speed", processor_handle,
                                      str(sensor_idx)))

    def amdsmi_get_gpu_fan_speed_max(self, processor_handle: FakeHandle, sensor_idx: int) -> int:
        self._check_enum(sensor_idx, int)
        return cast(int, self._answer("amdsmi_get_gpu_fan_speed_max", processor_handle,
                                      str(sensor_idx)))

    def amdsmi_get_link_metrics(self, processor_handle: FakeHandle) -> dict[str, Any]:
        metrics = self._answer("amdsmi_get_link_metrics", processor_handle)
        links = [{**link, "link_type": self._link_type(link["link_type"])}
                 for link in metrics["links"]]
        blank = {"bdf": "0000:00:00.0", "bit_rate": 0, "max_bandwidth": 0,
                 "link_type": self._link_type("AMDSMI_LINK_TYPE_UNKNOWN"), "read": 0, "write": 0}
        links += [dict(blank) for _ in range(AMDSMI_MAX_NUM_XGMI_LINKS - len(links))]
        return {"num_links": metrics["num_links"], "links": links}

    def amdsmi_topo_get_link_type(self, processor_handle_src: FakeHandle,
                                  processor_handle_dst: FakeHandle) -> dict[str, int]:
        src = self._device_index(processor_handle_src)
        dst = self._device_index(processor_handle_dst)
        self._count_and_fail("amdsmi_topo_get_link_type", src)
        self._count_and_fail("amdsmi_topo_get_link_type", dst, count=False)
        links = self.fixture.get("amdsmi_topo_get_link_type", {})
        link = links.get(f"{min(src, dst)},{max(src, dst)}")
        if link is None:
            _raise_status(STATUS["AMDSMI_STATUS_NOT_SUPPORTED"])
        return {"hops": int(link["hops"]), "type": self._link_type(link["type"])}

    # -- internals ------------------------------------------------------------------------------

    def _check_init(self) -> None:
        if not self.initialized:
            _raise_status(STATUS["AMDSMI_STATUS_NOT_INIT"])

    @staticmethod
    def _check_enum(value: Any, kind: type) -> None:
        if not isinstance(value, kind):
            raise AmdSmiParameterException(value, kind)

    def _device_index(self, handle: Any) -> int:
        if not isinstance(handle, FakeHandle):
            raise AmdSmiParameterException(handle, FakeHandle)
        self._check_init()
        return handle.index

    def _link_type(self, name: str) -> int:
        return int(self.AmdSmiLinkType[name])

    def _count_and_fail(self, fn: str, device: int, *, count: bool = True) -> None:
        if count:
            self.calls[(fn, device)] += 1
        for fault in self._faults:
            if fault.hits(fn, device, self.tick):
                _raise_status(fault.code)

    def _answer(self, fn: str, handle: Any, *path: str) -> Any:
        device = self._device_index(handle)
        self._count_and_fail(fn, device)
        value = self.devices[device].get(fn, _ABSENT)
        for override in self._overrides(device, fn):
            value = _merge(value, override)
        for key in path:
            self._raise_if_recorded(value)
            value = value.get(key, _ABSENT) if isinstance(value, dict) else _ABSENT
        self._raise_if_recorded(value)
        if value is _ABSENT:
            _raise_status(STATUS["AMDSMI_STATUS_NOT_SUPPORTED"])
        return copy.deepcopy(value)

    def _overrides(self, device: int, fn: str) -> list[Any]:
        out = []
        if self.ticks:
            recorded = self.ticks[min(self.tick, len(self.ticks) - 1)]
            if device < len(recorded) and fn in recorded[device]:
                out.append(recorded[device][fn])
        script = self._scripts.get((device, fn))
        if script:
            out.append(script[min(self.tick, len(script) - 1)])
        return out

    @staticmethod
    def _raise_if_recorded(value: Any) -> None:
        if isinstance(value, dict) and "__raise__" in value:
            _raise_status(status_code(value["__raise__"]))
