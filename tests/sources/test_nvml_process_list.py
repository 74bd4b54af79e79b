"""A GPU's running processes are asked in one driver call into an array of the binding's
process entries, read back through a plain ctypes struct laid out as the binding's: the same
PIDs, memory and MIG instances as the binding's own structs give."""

from __future__ import annotations

import ctypes
import types
from typing import Any

import pytest

from gputop.sources import nvml

pynvml = pytest.importorskip("pynvml")

NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value


def binding(entries: list[tuple[int, int, int, int]]) -> Any:
    """pynvml's structs and errors, with a driver entry point that answers `entries` (pid,
    used memory, GPU instance, compute instance) as nvmlDeviceGetComputeRunningProcesses_v3
    does: NVML_ERROR_INSUFFICIENT_SIZE and the count needed when the array is too small."""
    entry = pynvml.c_nvmlProcessInfo_v3_t
    asked: list[int] = []

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint),
                      ctypes.c_void_p)
    def running(handle: Any, count: Any, array: Any) -> int:
        asked.append(count[0])
        if count[0] < len(entries):
            count[0] = len(entries)
            return nvml.ERR_INSUFFICIENT_SIZE
        size = ctypes.sizeof(entry)
        for i, (pid, mem, gi, ci) in enumerate(entries):
            e = entry()
            e.pid, e.usedGpuMemory, e.gpuInstanceId, e.computeInstanceId = pid, mem, gi, ci
            ctypes.memmove(array + i * size, ctypes.addressof(e), size)
        count[0] = len(entries)
        return 0

    return types.SimpleNamespace(
        c_nvmlProcessInfo_v3_t=entry, NVMLError=pynvml.NVMLError,
        NVML_VALUE_NOT_AVAILABLE_ulonglong=pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong,
        _nvmlGetFunctionPointer=lambda name: running, asked=asked, keep=running)


def test_process_entries_read_through_a_plain_struct_are_the_bindings() -> None:
    plain = nvml._plain(pynvml.c_nvmlProcessInfo_v3_t)
    assert plain is not pynvml.c_nvmlProcessInfo_v3_t  # no attribute hook to go through
    e = pynvml.c_nvmlProcessInfo_v3_t()
    e.pid, e.usedGpuMemory, e.gpuInstanceId, e.computeInstanceId = 4242, 75 << 30, 3, 1
    p = plain.from_buffer_copy(bytes(e))
    assert (p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) == (
        e.pid, e.usedGpuMemory, e.gpuInstanceId, e.computeInstanceId) == (4242, 75 << 30, 3, 1)


def test_a_struct_laid_out_otherwise_is_read_through_the_binding() -> None:
    class Odd(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
        _pack_ = 1

    class NotCtypes:
        _fields_ = [("pid", ctypes.c_uint)]

    assert nvml._plain(Odd).__name__ == "Odd_plain"  # packed alike: the same layout
    assert nvml._plain(NotCtypes) is NotCtypes and nvml._plain(None) is None


def test_a_gpus_processes_in_one_call_and_again_when_the_array_is_too_small() -> None:
    entries = [(1000 + i, (i + 1) << 30, 0xFFFFFFFF, 0xFFFFFFFF) for i in range(20)]
    entries[3] = (1003, NOT_AVAILABLE, 2, 0)  # memory not reported (WDDM), a MIG instance
    n = binding(entries)
    room: dict[str, int] = {}
    name = "nvmlDeviceGetComputeRunningProcesses_v3"
    got = nvml._running_processes(n, name, None, room)
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in got] == [
        (pid, None if mem == NOT_AVAILABLE else mem, gi, ci) for pid, mem, gi, ci in entries]
    assert n.asked == [16, 45] and room[name] == 45  # grown as the binding grows it
    nvml._running_processes(n, name, None, room)
    assert n.asked[-1] == 45  # the next tick asks with room enough, in one call


def test_process_use_through_the_wrappers_of_a_binding_without_the_structs() -> None:
    sample = types.SimpleNamespace(pid=7, timeStamp=5, smUtil=40, memUtil=3)
    asked: list[tuple[Any, int]] = []

    def wrapper(handle: Any, last_seen: int) -> list[Any]:
        asked.append((handle, last_seen))
        return [sample]

    n = types.SimpleNamespace(nvmlDeviceGetProcessesUtilizationInfo=wrapper,
                              nvmlDeviceGetProcessUtilization=wrapper, NVMLError=pynvml.NVMLError)
    assert nvml._processes_utilization(n, "h", 4, {}) == [sample]
    assert nvml._process_utilization(n, "h", 4, {}) == [sample]
    assert asked == [("h", 4), ("h", 4)]
