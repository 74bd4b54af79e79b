"""Where a GPU's memory goes: NVML's used memory split by the in-process probe into PyTorch's
tensors, its cache, what the process holds outside PyTorch, and other processes."""

from __future__ import annotations

from dataclasses import replace

from gputop.model import Missing, ProbeStats, ProcessSample, Snapshot
from gputop.model.memory_split import home_processes, memory_split, memory_splits
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0
MiB = 1 << 20


def probed(pid: int, gpu: int, nvml: int | Missing, allocated: int, reserved: int, *,
           age: float = 0.5, conf: str | None = None) -> ProcessSample:
    stats = ProbeStats(ts=T0 - age, device=gpu, allocated=allocated, reserved=reserved,
                       allocator_conf=conf)
    return ProcessSample(pid=pid, device_index=gpu, gpu_mem=nvml, probe=stats)


def plain(pid: int, gpu: int, nvml: int) -> ProcessSample:
    return ProcessSample(pid=pid, device_index=gpu, gpu_mem=nvml)


def gpu(*procs: ProcessSample, used: int | None = None, **device: object) -> Snapshot:
    """One H100 whose used memory is its processes' (or `used`)."""
    total = sum(p.gpu_mem for p in procs if isinstance(p.gpu_mem, int))
    s = node(1, time=T0, mem_used=total if used is None else used, **device)
    return replace(s, processes=procs)


def test_a_training_process_splits_into_tensors_cache_and_context_plus_nccl() -> None:
    # 62 GiB reserved by PyTorch, 47 GiB of it in tensors; NVML counts 63.9 GiB for the process.
    s = gpu(probed(11, 0, 63 * GIB + 900 * MiB, 47 * GIB, 62 * GIB))
    split = memory_split(s, 0)
    assert split is not None
    assert (split.allocated, split.cached, split.non_pytorch, split.other) == (
        47 * GIB, 15 * GIB, GIB + 900 * MiB, 0)
    assert sum(split.parts) == split.used
    (pm,) = split.processes
    assert (pm.pid, pm.reserved, pm.nvml, pm.short) == (11, 62 * GIB, 63 * GIB + 900 * MiB, 0)
    assert split.notes == ()


def test_a_notebook_without_a_probe_is_the_other_part() -> None:
    s = gpu(probed(11, 0, 60 * GIB, 40 * GIB, 58 * GIB), plain(12, 0, 3 * GIB))
    split = memory_split(s, 0)
    assert split is not None
    assert split.parts == (40 * GIB, 18 * GIB, 2 * GIB, 3 * GIB)
    assert [pm.pid for pm in split.processes] == [11]


def test_used_memory_no_process_accounts_for_is_other_too() -> None:
    # NVML's device figure can hold more than its process list (a process in another container).
    s = gpu(probed(11, 0, 20 * GIB, 10 * GIB, 19 * GIB), used=25 * GIB)
    split = memory_split(s, 0)
    assert split is not None and split.parts == (10 * GIB, 9 * GIB, GIB, 5 * GIB)


def test_nvml_below_reserved_gives_no_negative_part_and_says_why() -> None:
    # The allocator grew between the probe's publish and NVML's read: reserved 30 GiB, NVML 29.
    s = gpu(probed(11, 0, 29 * GIB, 20 * GIB, 30 * GIB), plain(12, 0, 2 * GIB))
    split = memory_split(s, 0)
    assert split is not None
    assert (split.allocated, split.cached, split.non_pytorch) == (20 * GIB, 10 * GIB, 0)
    assert split.other == GIB  # 31 used - 30 reserved: the notebook's 2 GiB less the shortfall
    assert split.processes[0].short == GIB
    (note,) = split.notes
    assert "PID 11" in note and "1,024 MiB less than PyTorch reserved" in note


def test_a_stale_probe_is_not_used_and_its_process_counts_as_other() -> None:
    s = gpu(probed(11, 0, 40 * GIB, 30 * GIB, 39 * GIB, age=12.0),
            probed(12, 0, 20 * GIB, 10 * GIB, 19 * GIB))
    split = memory_split(s, 0)
    assert split is not None
    assert split.parts == (10 * GIB, 9 * GIB, GIB, 40 * GIB)
    assert split.notes == ("PID 11: its probe is 12 s old; not used",)
    only_stale = gpu(probed(11, 0, 40 * GIB, 30 * GIB, 39 * GIB, age=12.0))
    assert memory_split(only_stale, 0) is None


def test_no_probe_no_split() -> None:
    s = gpu(plain(11, 0, 40 * GIB))
    assert memory_split(s, 0) is None
    assert memory_splits(s) == {}


def test_a_probe_without_cuda_or_under_cudamallocasync_gives_no_split() -> None:
    no_cuda = replace(probed(11, 0, 0, 0, 0), probe=ProbeStats(ts=T0, steps=10))
    assert memory_split(gpu(no_cuda, used=GIB), 0) is None
    async_alloc = probed(11, 0, 40 * GIB, 0, 0, conf="backend:cudaMallocAsync")
    s = gpu(async_alloc)
    assert memory_split(s, 0) is None


def test_a_lost_gpu_or_one_without_used_memory_has_no_split() -> None:
    p = probed(11, 0, 40 * GIB, 30 * GIB, 39 * GIB)
    assert memory_split(gpu(p, lost=Missing("gpu_lost", since=T0)), 0) is None
    s = gpu(p)
    no_perm = replace(s, devices=(replace(s.devices[0], mem_used=Missing("no_permission")),))
    assert memory_split(no_perm, 0) is None


def test_under_mig_the_processes_split_the_whole_gpu_where_nvml_gives_their_memory() -> None:
    # Two MIG instances: a probed trainer in 1.0 and a process without probe in 2.0.
    trainer = replace(probed(11, 0, 18 * GIB, 12 * GIB, 17 * GIB), gpu_instance=1,
                      compute_instance=0)
    other = replace(plain(12, 0, 5 * GIB), gpu_instance=2, compute_instance=0)
    split = memory_split(gpu(trainer, other, mig_enabled=True), 0)
    assert split is not None and split.parts == (12 * GIB, 5 * GIB, GIB, 5 * GIB)


def test_without_nvml_process_memory_the_context_stays_in_other_and_is_noted() -> None:
    # WDDM, or MIG without privileges: NVML reports the GPU's memory but not the process's.
    p = probed(11, 0, Missing("unsupported"), 12 * GIB, 17 * GIB)
    split = memory_split(gpu(p, used=18 * GIB), 0)
    assert split is not None
    assert split.parts == (12 * GIB, 5 * GIB, 0, GIB)
    assert split.processes[0].non_pytorch is None
    assert "no memory figure" in split.notes[0]


def test_a_process_on_two_gpus_is_split_once_where_its_allocator_works() -> None:
    home = probed(11, 0, 50 * GIB, 40 * GIB, 48 * GIB)
    peer = probed(11, 1, 600 * MiB, 40 * GIB, 48 * GIB)  # same payload; a context on GPU 1
    s = replace(node(2, time=T0, mem_used=50 * GIB), processes=(home, peer))
    splits = memory_splits(s)
    assert set(splits) == {0}
    assert splits[0].parts == (40 * GIB, 8 * GIB, 2 * GIB, 0)
    # The diagnostics judge its allocator on the same GPU; a process without a probe has none.
    with_plain = replace(s, processes=(peer, plain(12, 1, 9 * GIB), home))
    assert home_processes(with_plain) == {11: home}
