"""What gputop.probe costs the training loop: per wrapped next(), per step(), per publish.

    python bench/probe_bench.py

Runs on the CPU. With torch installed, batches are real CPU tensors; without it, lists. The
allocator calls are those of a fake `torch.cuda` whose memory_stats() spins for 120 µs, the cost
measured on an H100 (80-150 µs, notes §4.2), so the step() figures include what a real GPU adds.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import gputop.probe as gp
from gputop.probe import Probe

N = 200_000
REPEATS = 5
MEMORY_STATS_S = 120e-6  # one torch.cuda.memory_stats() call on an H100
RESET_S = 5e-6  # reset_peak_memory_stats(): a C call, no dict to build


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class FakeCuda:
    """torch.cuda as the probe calls it, costing what the real calls cost."""

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def get_device_properties(self, device: int) -> Any:
        return SimpleNamespace(uuid="58e4b2c6-8a5e-1c1f-3d6b-0123456789ab")

    def memory_stats(self, device: int) -> dict[str, int]:
        spin(MEMORY_STATS_S)
        return {"allocated_bytes.all.peak": 1 << 30, "reserved_bytes.all.peak": 2 << 30}

    def reset_peak_memory_stats(self, device: int) -> None:
        spin(RESET_S)


def best_of(fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(REPEATS))


def batches() -> tuple[list[Any], str]:
    try:
        import torch
    except ImportError:
        return [[i] * 32 for i in range(N)], "lists (no torch)"
    x, y = torch.zeros(32, 16), torch.zeros(32)
    return [(x, y)] * N, f"(inputs, labels) CPU tensors, torch {torch.__version__}"


def per_next_ns(items: list[Any]) -> tuple[float, float]:
    """Loop time per item, plain and wrapped; the difference is the probe's cost."""
    def plain() -> float:
        start = time.perf_counter()
        for _ in items:
            pass
        return (time.perf_counter() - start) / len(items)

    def wrapped() -> float:
        probe = Probe()
        start = time.perf_counter()
        for _ in probe.wrap(items):
            pass
        return (time.perf_counter() - start) / len(items)

    return best_of(plain) * 1e9, best_of(wrapped) * 1e9


def per_step_us(cuda: Any, steps: int, step_s: float = 0.0) -> float:
    """step() cost alone, averaged over `steps` steps that each take `step_s` of other work."""
    probe = Probe(torch_module=SimpleNamespace(cuda=cuda))
    probe._attach_torch()
    spent = 0.0
    for _ in range(steps):
        if step_s:
            spin(step_s)
        start = time.perf_counter()
        probe.step(batch_size=32)
        spent += time.perf_counter() - start
    return spent / steps * 1e6


def publish_ms(cuda: Any) -> float:
    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_RUNTIME_DIR"] = d
        probe = Probe(torch_module=SimpleNamespace(cuda=cuda, __version__="bench"))
        probe.start(interval=3600)
        try:
            for _ in probe.wrap(range(100)):
                probe.step()
            times = []
            for _ in range(200):
                start = time.perf_counter()
                probe.publish()
                times.append(time.perf_counter() - start)
        finally:
            probe.stop()
    return statistics.median(times) * 1e3


def main() -> None:
    items, kind = batches()
    plain, wrapped = per_next_ns(items)
    print(f"wrapped next() over {kind}:")
    print(f"  plain loop {plain:7.0f} ns/item, wrapped {wrapped:7.0f} ns/item, "
          f"probe adds {wrapped - plain:5.0f} ns per next()")

    print("step(), no CUDA (CPU training: bookkeeping only):")
    print(f"  {per_step_us(None, N):7.2f} µs per step")

    cuda = FakeCuda()
    print(f"step() with a CUDA allocator (memory_stats {MEMORY_STATS_S * 1e6:.0f} µs, "
          f"peaks read at most twice per {gp.PEAK_EVERY_S:g} s):")
    for step_ms in (1, 10, 100):
        steps = max(20, int(3.0 / (step_ms / 1e3)))
        us = per_step_us(cuda, steps, step_ms / 1e3)
        print(f"  {step_ms:4d} ms steps: {us:7.2f} µs per step ({us / (step_ms * 10):.3f} %)")
    saved, gp.PEAK_EVERY_S = gp.PEAK_EVERY_S, 0.0
    try:
        us = per_step_us(cuda, 3000, 1e-3)
    finally:
        gp.PEAK_EVERY_S = saved
    print(f"  for comparison, reading peaks on every 1 ms step: {us:7.2f} µs per step")

    print("publish (publisher thread, once a second: memory_stats + JSON + atomic write):")
    print(f"  {publish_ms(cuda):.3f} ms per publish")


if __name__ == "__main__":
    main()
