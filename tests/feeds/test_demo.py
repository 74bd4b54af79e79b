"""The demo recording shipped in the package: what `gputop --demo` shows a newcomer with no GPU.

It is synthetic (tools/make_demo.py), so these tests hold it to the H100 facts it claims and to the
story the diagnostics are meant to find in it.
"""

from __future__ import annotations

import gzip
import itertools
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gputop.feeds.playback import demo_path
from gputop.model import THROTTLE, DeviceSample, Missing, ProcessSample, Snapshot
from gputop.model.memory_split import memory_splits
from gputop.recording import ReadResult, read_recording, read_summary

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "make_demo.py"
MiB, GiB = 1 << 20, 1 << 30
STEADY, STARVED, HOT, LEAK = (30, 130), (130, 330), (450, 520), (520, 600)


@pytest.fixture(scope="module")
def demo() -> ReadResult:
    return read_recording(demo_path())


@pytest.fixture(scope="module")
def snaps(demo: ReadResult) -> list[Snapshot]:
    return demo.snapshots


def ticks(snaps: Sequence[Snapshot], window: tuple[int, int]) -> Sequence[Snapshot]:
    return snaps[window[0]:window[1]]


def gpu(snaps: Sequence[Snapshot], index: int) -> list[DeviceSample]:
    return [d for s in snaps for d in s.devices if d.index == index]


def ranks(snap: Snapshot) -> list[ProcessSample]:
    return [p for p in snap.processes if p.user == "mlteam"]


def test_demo_reads_back_whole_and_says_it_is_synthetic(demo: ReadResult) -> None:
    assert demo.warning is None
    assert len(demo.snapshots) == 600
    assert demo.header["meta"] == {"synthetic": True, "node": "8x H100 80GB HBM3 (synthetic demo)",
                                   "generator": "tools/make_demo.py"}
    gaps = [b.time - a.time for a, b in itertools.pairwise(demo.snapshots)]
    assert all(0.98 < g < 1.02 for g in gaps)


def test_every_gpu_is_an_h100_sxm_with_its_measured_facts(snaps: list[Snapshot]) -> None:
    for s in snaps:
        assert s.system.driver_version == "580.159.04"
        assert (s.system.cuda_version, s.system.nvml_version) == ("13.0", "13.580.159.04")
        assert [d.index for d in s.devices] == list(range(8))
        for d in s.devices:
            assert d.name == "NVIDIA H100 80GB HBM3" and d.vendor == "nvidia"
            assert (d.mem_total, d.mem_reserved) == (85_520_809_984, 503_316_480)
            assert d.mem_free == d.mem_total - d.mem_reserved - d.mem_used
            assert d.mem_used == sum(p.gpu_mem for p in s.processes_on(d.index))
            assert (d.power_limit, d.power_default_limit) == (700.0, 700.0)
            assert 100 <= d.power_draw <= 700
            assert (d.clock_sm_max, d.clock_mem, d.clock_mem_max) == (1980, 2619, 2619)
            assert d.clock_sm <= 1980 and d.clock_sm % 15 == 0
            assert (d.temp_slowdown, d.temp_shutdown, d.temp_max_operating) == (89, 95, 87)
            assert d.temp_margin == 87 - d.temp_gpu and 25 <= d.temp_gpu < 89
            assert isinstance(d.util_gpu, int) and 0 <= d.util_gpu <= 100
            assert d.fan == Missing("unsupported")
            assert (d.persistence_mode, d.compute_capability, d.pstate) == (True, "9.0", 0)
            assert (d.pcie_gen_max, d.pcie_width, d.pcie_width_max) == (5, 16, 16)
            assert (d.ecc_enabled, d.ecc_corrected, d.ecc_uncorrected) == (True, 0, 0)
            assert (d.mig_enabled, d.mig_devices) == (False, ())
            assert set(d.throttle) <= set(THROTTLE)
            assert d.cpu_affinity == ("0-51" if d.index < 4 else "52-103")
            assert d.numa_node == d.index // 4


def test_the_host_is_a_dgx_with_104_cores_and_2_tib(snaps: list[Snapshot]) -> None:
    for s in snaps:
        h = s.host
        assert (h.hostname, h.cpu_count, len(h.cpu_percent_per_core)) == ("dgx-h100-07", 104, 104)
        assert h.cpu_percent == pytest.approx(statistics.mean(h.cpu_percent_per_core), abs=0.06)
        assert 1.9 * 2**40 < h.mem_total <= 2**41 and h.mem_used + h.mem_available < h.mem_total


def test_all_gpus_meet_on_nvswitch_with_18_nvlink4_links(snaps: list[Snapshot]) -> None:
    topo = snaps[0].topology
    assert topo is not None
    assert topo.matrix == tuple(tuple("X" if a == b else "NV18" for b in range(8))
                                for a in range(8))
    assert topo.cpu_affinity == ("0-51",) * 4 + ("52-103",) * 4
    assert topo.numa_affinity == ("0",) * 4 + ("1",) * 4
    for s in (snaps[0], snaps[-1]):
        assert len(s.links) == 8 * 18
        for lk in s.links:
            assert (lk.kind, lk.version, lk.remote_kind, lk.up) == ("nvlink", "4.0", "switch", True)
            assert lk.speed == pytest.approx(26.56e9, rel=1e-3)
            assert 0 <= lk.rx <= lk.speed and 0 <= lk.tx <= lk.speed


def test_one_nvlink_on_gpu6_replays_and_no_other_link_errs(snaps: list[Snapshot]) -> None:
    def errors(s: Snapshot) -> dict[str, dict[str, int]]:
        return {lk.key: dict(lk.errors) for lk in s.links if any(lk.errors.values())}

    first, last = errors(snaps[0]), errors(snaps[-1])
    assert list(last) == ["6:11"] and list(first) == ["6:11"]
    assert last["6:11"]["replay"] > first["6:11"]["replay"]
    assert {k: v for k, v in last["6:11"].items() if k != "replay"} == dict.fromkeys(
        ("crc_flit", "crc_data", "recovery"), 0)


def test_all_reduce_shows_as_nvlink_bursts_in_training(snaps: list[Snapshot]) -> None:
    rates = [lk.rx for s in ticks(snaps, STEADY) for lk in s.links if lk.key == "0:0"]
    assert max(rates) > 3 * statistics.median(rates) > 0


def test_nine_gpu_processes_one_slurm_job_and_a_jupyter_kernel(snaps: list[Snapshot]) -> None:
    s = snaps[100]
    assert len(s.processes) == 9
    assert [p.device_index for p in ranks(s)] == list(range(8))
    for p in ranks(s):
        assert p.job is not None and p.job.label() == "slurm:48213"
        assert p.cmdline[:5] == ("/usr/bin/python3", "-u", "train.py", "--config",
                                 "configs/llama-8b.yaml")
        assert p.cmdline[5] == f"--local_rank={p.device_index}"
        assert 62 * GiB <= p.gpu_mem <= 71 * GiB and 20 * GiB <= p.rss <= 30 * GiB
        assert 95 <= p.cpu_percent <= 110  # the CUDA sync spin
        assert [c.name for c in p.children] == ["pt_data_worker"] * 6
    (alice,) = [p for p in s.processes if p.user == "alice"]
    assert alice.device_index == 7 and alice.gpu_mem == 3 * GiB and alice.sm_util == 0
    assert alice.job is not None and alice.job.container_runtime == "docker"
    assert len(alice.job.container_id or "") == 64
    assert alice.job.label() == f"docker:{alice.job.container_id[:12]}"


def test_steady_training_is_busy_and_power_capped(snaps: list[Snapshot]) -> None:
    for i in range(8):
        ds = gpu(ticks(snaps, STEADY), i)
        assert statistics.mean(d.util_gpu for d in ds) >= 97
        assert statistics.mean(d.power_draw for d in ds) >= 680
        assert 1350 <= statistics.median(d.clock_sm for d in ds) <= 1515
        assert sum("sw_power_cap" in d.throttle for d in ds) > 0.9 * len(ds)
        assert max(d.temp_gpu for d in ds) <= 70


def test_starved_loader_leaves_gpus_half_idle_and_workers_pegged(snaps: list[Snapshot]) -> None:
    window = ticks(snaps, STARVED)
    for i in range(8):
        ds = gpu(window, i)
        assert statistics.mean(d.util_gpu for d in ds) < 60
        assert statistics.mean(d.gr_active for d in ds) < 60
        assert statistics.mean(d.power_draw for d in ds) < 450
    workers = [c.cpu_percent for s in window for p in ranks(s) for c in p.children]
    assert len(workers) == (STARVED[1] - STARVED[0]) * 48 and min(workers) >= 90


def test_gpu5_overheats_throttles_and_straggles(snaps: list[Snapshot]) -> None:
    hot = gpu(ticks(snaps, HOT), 5)
    assert sum("sw_thermal" in d.throttle for d in hot) >= 40
    assert 86 <= max(d.temp_gpu for d in hot) <= 88
    assert all(-1 <= d.temp_margin <= 2 for d in hot[-30:])
    assert 1000 <= statistics.median(d.clock_sm for d in hot[-30:]) <= 1200
    assert hot[-1].throttle_time["sw_thermal"] - hot[0].throttle_time["sw_thermal"] > 30
    others = [d.util_gpu for i in range(8) if i != 5 for d in gpu(ticks(snaps, HOT), i)]
    assert statistics.mean(others) < statistics.mean(d.util_gpu for d in hot)
    for i in range(8):
        assert i == 5 or not any("sw_thermal" in d.throttle for d in gpu(snaps, i))


def test_gpu2_leaks_about_40_mib_a_second_at_the_end(snaps: list[Snapshot]) -> None:
    a, b = ticks(snaps, LEAK)[0], ticks(snaps, LEAK)[-1]
    seconds = b.time - a.time
    for pa, pb in zip(ranks(a), ranks(b)):
        growth = (pb.gpu_mem - pa.gpu_mem) / seconds / MiB
        if pa.device_index == 2:
            assert 35 <= growth <= 45
        else:
            assert growth == 0


def test_cumulative_counters_only_grow(snaps: list[Snapshot]) -> None:
    for i in range(8):
        ds = gpu(snaps, i)
        for a, b in itertools.pairwise(ds):
            assert b.energy_j - a.energy_j == pytest.approx(b.power_draw, abs=0.01)
            assert all(b.throttle_time[k] >= v for k, v in a.throttle_time.items())


def test_regenerating_the_demo_gives_the_same_file(tmp_path: Path) -> None:
    out = tmp_path / "demo.jsonl.gz"
    subprocess.run([sys.executable, str(GENERATOR), str(out)], check=True, cwd=ROOT,
                   capture_output=True)
    shipped = demo_path().read_bytes()
    assert out.read_bytes()[4:8] == b"\0\0\0\0"  # the gzip header carries no timestamp
    # Compare what was written, not how a given zlib build compressed it, and the ticks only:
    # the summary after them follows the diagnostics of the day, its footer the compression.
    assert tick_lines(out.read_bytes()) == tick_lines(shipped), (
        "the shipped demo is out of date: run `python tools/make_demo.py` and commit it")
    assert read_summary(demo_path())["recap"]["ticks"] == 600  # `gputop report` reads it


def tick_lines(data: bytes) -> list[bytes]:
    return [x for x in gzip.decompress(data).splitlines() if not x.startswith(b'{"summary')]


def test_every_rank_runs_the_probe_and_its_memory_splits_as_the_story_says(
        snaps: list[Snapshot]) -> None:
    ctx_nccl = 742 * MiB + 1280 * MiB  # CUDA context with cuBLAS, and NCCL's buffers
    for s in snaps[30:]:
        splits = memory_splits(s)
        assert sorted(splits) == list(range(8))
        for p in ranks(s):
            probe = p.probe
            assert probe is not None and probe.device == p.device_index
            assert 0 < s.time - probe.ts < 1  # published within the last second
            assert 0.69 <= probe.allocated / probe.reserved <= 0.81
            assert probe.allocated <= probe.peak_allocated <= probe.reserved
            assert (probe.num_alloc_retries, probe.num_ooms) == (0, 0)
            (pm,) = splits[p.device_index].processes
            assert pm.non_pytorch == ctx_nccl and pm.short == 0
        assert splits[7].other == 3 * GiB  # the notebook runs no probe
        assert all(splits[i].other == 0 for i in range(7))


def test_the_probe_sees_the_loop_wait_for_its_batches_only_while_starved(
        snaps: list[Snapshot]) -> None:
    def waits(window: tuple[int, int]) -> list[float]:
        return [p.probe.wait_frac for s in ticks(snaps, window) for p in ranks(s)]

    assert min(waits((240, 330))) > 0.5  # once its last 50 steps are all starved ones
    assert max(waits((70, 130))) < 0.02 and max(waits((400, 600))) < 0.02
    assert max(waits((25, 70))) < 0.05  # warm-up gaps are the host compiling, not next()


def test_the_probes_recent_share_sees_the_loader_catch_up_within_seconds(
        snaps: list[Snapshot]) -> None:
    def recent(window: tuple[int, int]) -> list[float]:
        return [p.probe.recent_wait_frac for s in ticks(snaps, window) for p in ranks(s)]

    assert min(recent((145, 331))) > 0.5  # its last few steps all starved within 15 s
    assert max(recent((338, 600))) < 0.05  # the stall ends at 330, its last waits by ~332
    assert min(p.probe.wait_frac for p in ranks(snaps[345])) > 0.4  # the 50 steps still trail


def test_gpu2s_leak_is_in_tensors_not_in_the_allocators_cache(snaps: list[Snapshot]) -> None:
    def mean_split(window: tuple[int, int]) -> tuple[float, float]:
        splits = [memory_splits(s)[2] for s in ticks(snaps, window)]
        return (statistics.mean(x.allocated for x in splits),
                statistics.mean(x.cached for x in splits))

    (alloc0, cache0), (alloc1, cache1) = mean_split((520, 530)), mean_split((590, 600))
    assert alloc1 - alloc0 > 2 * GiB and abs(cache1 - cache0) < GiB
