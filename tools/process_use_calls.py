"""On a real NVIDIA GPU with a process running on GPU 0: gputop's one-call reads of each
process's utilization (`gputop.sources.nvml`) against the binding's wrappers, which make two
driver calls (the count, then the samples). Prints each one's CPU and wall time (median and
range of 15 calls, 0.25 s apart, samples of the last 2 s) and its last answer, so that the two
can be compared; then the same for a few other calls gputop makes.

    PYTHONPATH=src python3 tools/process_use_calls.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import pynvml as nvml

from gputop.sources.nvml import _process_utilization, _processes_utilization


def _since() -> int:
    return int(time.time() * 1e6) - 2_000_000


def timed(label: str, call: Callable[[int], Any], times: int = 15) -> Any:
    cpu, wall, out = [], [], None
    for _ in range(times):
        last_seen = _since()
        t0, w0 = time.thread_time(), time.perf_counter()
        try:
            out = call(last_seen)
        except nvml.NVMLError as e:
            out = repr(e)
        cpu.append((time.thread_time() - t0) * 1e3)
        wall.append((time.perf_counter() - w0) * 1e3)
        time.sleep(0.25)
    print(f"{label}: cpu median {statistics.median(cpu):.3f} ms ({min(cpu):.3f}-{max(cpu):.3f}), "
          f"wall median {statistics.median(wall):.3f} ms ({min(wall):.3f}-{max(wall):.3f})")
    return out


def shown(out: Any) -> Any:
    if isinstance(out, (str, int)):
        return out
    if isinstance(out, list) and out and hasattr(out[0], "smUtil"):
        return sorted((s.pid, s.smUtil, s.memUtil) for s in out)[:6]
    return str(out)[:120]


def main() -> None:
    nvml.nvmlInit()
    print("driver", nvml.nvmlSystemGetDriverVersion())
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    running = nvml.nvmlDeviceGetComputeRunningProcesses(h)
    print("running", [(p.pid, p.usedGpuMemory) for p in running])
    room: dict[str, int] = {}
    calls: list[tuple[str, Callable[[int], Any], int]] = [
        ("v2 wrapper", lambda ts: nvml.nvmlDeviceGetProcessesUtilizationInfo(h, ts), 15),
        ("v2 gputop", lambda ts: _processes_utilization(nvml, h, ts, room), 15),
        ("v1 wrapper", lambda ts: nvml.nvmlDeviceGetProcessUtilization(h, ts), 15),
        ("v1 gputop", lambda ts: _process_utilization(nvml, h, ts, room), 15),
        ("v2 wrapper ts=0", lambda ts: nvml.nvmlDeviceGetProcessesUtilizationInfo(h, 0), 5),
        ("v2 gputop ts=0", lambda ts: _processes_utilization(nvml, h, 0, room), 5),
    ]
    for label, call, times in calls:
        print("   last answer:", shown(timed(label, call, times)))
    print("room", room)
    others: list[tuple[str, Callable[[int], Any]]] = [
        ("running wrapper", lambda ts: nvml.nvmlDeviceGetComputeRunningProcesses(h)),
        ("nvlink state 0", lambda ts: nvml.nvmlDeviceGetNvLinkState(h, 0)),
        ("nvlink err 0", lambda ts: nvml.nvmlDeviceGetNvLinkErrorCounter(h, 0, 0)),
        ("pcie tx", lambda ts: nvml.nvmlDeviceGetPcieThroughput(h, 0)),
        ("energy", lambda ts: nvml.nvmlDeviceGetTotalEnergyConsumption(h)),
    ]
    for label, call in others:
        print("   last answer:", shown(timed(label, call, 5)))


if __name__ == "__main__":
    main()
