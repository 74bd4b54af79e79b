"""The real NVML source, through NVIDIA's real binding, over a fake libnvidia-ml serving recorded
snapshots. What a user sees when a GPU is healthy, unsupported, forbidden, lost or mismatched."""

from __future__ import annotations

import dataclasses

import pytest

from gputop.errors import BackendUnavailable, DriverMismatch
from gputop.model import MigDevice, Missing, ProcessSample
from gputop.sources.nvml import (
    STATE_EVERY_S,
    NvmlSource,
    _process_utilization,
    _processes_utilization,
)
from gputop.testing.fake_nvml import FakeNvml, Fault
from gputop.testing.synthetic import GIB, H100_RESERVED, h100, node, series

NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, TIMEOUT = 3, 4, 6, 10
DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, GPU_IS_LOST, MISMATCH = 9, 12, 13, 15, 18


def run(snaps, faults=(), ticks=None, **kw):
    """Open the source over the fake and poll it once per recorded tick."""
    with FakeNvml(snaps, faults=faults) as fake:
        src = NvmlSource(slow_interval=kw.pop("slow_interval", 0), **kw)
        src.open()
        out = []
        for t in range(ticks or len(snaps)):
            out.append(src.poll(snaps[min(t, len(snaps) - 1)].time))
            fake.advance()
        src.close()
    return out, fake, src


def test_an_h100_reads_as_recorded() -> None:
    snaps = [node(2, time=1000.0 + t, links=18) for t in range(3)]
    ticks, _, _ = run(snaps)
    d = ticks[-1].devices[0]
    want = snaps[-1].devices[0]
    for name in ("name", "uuid", "pci_bus_id", "util_gpu", "util_mem", "mem_total", "mem_used",
                 "mem_reserved", "mem_free", "temp_gpu", "temp_mem", "temp_slowdown",
                 "temp_shutdown", "temp_max_operating", "temp_margin", "power_draw",
                 "power_limit", "power_default_limit", "clock_sm", "clock_sm_max", "clock_mem",
                 "clock_mem_max", "pstate", "throttle", "throttle_time", "pcie_gen",
                 "pcie_gen_max", "pcie_width", "pcie_width_max", "ecc_enabled",
                 "remap_pending", "mig_enabled", "gr_active", "sm_active", "sm_occupancy",
                 "tensor_active", "dram_active", "compute_capability", "cpu_affinity",
                 "numa_node", "persistence_mode", "energy_j"):
        assert getattr(d, name) == getattr(want, name), name
    assert d.mem_reserved == H100_RESERVED  # NVML v2 splits driver-reserved memory out
    assert d.fan == Missing("unsupported")  # SXM parts report no fan
    assert d.pcie_rx == pytest.approx(want.pcie_rx, rel=1e-3)  # GPM, MiB/s -> bytes/s
    assert ticks[-1].processes == [
        ProcessSample(pid=1000, device_index=0, gpu_mem=9 * GIB, sm_util=80.0, mem_util=25.0),
        ProcessSample(pid=1001, device_index=1, gpu_mem=9 * GIB, sm_util=80.0, mem_util=25.0)]


def test_nvlink_rates_come_from_cumulative_counters() -> None:
    snaps = [node(2, time=1000.0 + t, links=4) for t in range(3)]
    ticks, _, _ = run(snaps)
    first = [lk for lk in ticks[0].links if lk.device_index == 0]
    assert first[0].rx == Missing("pending")  # a rate needs two readings
    links = [lk for lk in ticks[-1].links if lk.device_index == 0]
    assert [lk.link for lk in links] == [0, 1, 2, 3]
    assert all(lk.up is True and lk.version == "4.0" and lk.remote_kind == "switch"
               for lk in links)
    assert links[0].rx == pytest.approx(5.0e9, rel=1e-3)
    assert links[0].errors == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}


def test_each_links_rates_come_from_its_own_tx_and_rx_answers() -> None:
    # The rates are read by position in the field-values answer: links and directions with
    # rates of their own, and a link whose counters the driver does not offer.
    snaps = []
    for t in range(3):
        s = node(1, time=1000.0 + t, links=3)
        lks = [dataclasses.replace(lk, rx=1e9 * (lk.link + 1), tx=3e9 * (lk.link + 1))
               for lk in s.links]
        lks[1] = dataclasses.replace(lks[1], rx=Missing("unsupported"), tx=Missing("unsupported"))
        snaps.append(dataclasses.replace(s, links=tuple(lks)))
    ticks, _, _ = run(snaps)
    got = {lk.link: (lk.rx, lk.tx) for lk in ticks[-1].links}
    assert got[0] == (pytest.approx(1e9, rel=1e-3), pytest.approx(3e9, rel=1e-3))
    assert got[1] == (Missing("unsupported"), Missing("unsupported"))
    assert got[2] == (pytest.approx(3e9, rel=1e-3), pytest.approx(9e9, rel=1e-3))


def test_what_did_not_change_on_a_link_is_held_once_across_ticks() -> None:
    # The diagnostics keep minutes of ticks: a link's unchanged readings are not kept anew.
    steady = [node(1, time=1000.0 + t, links=2) for t in range(4)]
    ticks, _, _ = run(steady)
    assert ticks[-1].links == ticks[-2].links
    assert all(a is b for a, b in zip(ticks[-1].links, ticks[-2].links, strict=True))
    busier = [dataclasses.replace(s, links=tuple(
        dataclasses.replace(lk, rx=(5 + t) * 1e9, tx=(5 + t) * 1e9) for lk in s.links))
        for t, s in enumerate(steady)]
    ticks, _, _ = run(busier)
    a, b = ticks[-2].links[0], ticks[-1].links[0]
    assert b.rx == pytest.approx(8e9, rel=1e-3) and a.rx == pytest.approx(7e9, rel=1e-3)
    assert b.errors == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    assert b.errors is a.errors and b.up is True


def _counting_link_errors(ticks: int) -> list:
    """One GPU with two links whose replay counter reads the tick's number."""
    snaps = []
    for t in range(ticks):
        s = node(1, time=1000.0 + t, links=2)
        snaps.append(dataclasses.replace(s, links=tuple(
            dataclasses.replace(lk, errors={**lk.errors, "replay": t}) for lk in s.links)))
    return snaps


def test_nvlink_state_and_errors_and_mig_mode_every_slow_tick_when_asked() -> None:
    ticks, fake, _ = run(_counting_link_errors(31), slow_interval=5, state_interval=5)
    # Open finds the links with the same call; then 2 links at 0, 5, ... 30 s.
    assert fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == 7 * 2 * 4
    assert fake.calls["nvmlDeviceGetMigMode"] == 7
    assert [t.links[0].errors["replay"] for t in ticks] == [t - t % 5 for t in range(31)]


def test_nvlink_state_and_errors_and_mig_mode_every_15_s_never_older() -> None:
    ticks, fake, _ = run(_counting_link_errors(31), slow_interval=5)
    assert STATE_EVERY_S == 15.0  # Prometheus' default scrape interval (docs/metrics.md)
    assert fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == 3 * 2 * 4  # at 0, 15 and 30 s
    assert fake.calls["nvmlDeviceGetMigMode"] == 3
    shown = [t.links[0].errors["replay"] for t in ticks]
    assert shown == [t - t % 15 for t in range(31)]
    assert all(t - v < 15 for t, v in enumerate(shown))
    # The rates, from the field values, still follow every slow tick.
    assert fake.calls["nvmlDeviceGetFieldValues"] == 7
    assert all(lk.up is True and lk.rx == pytest.approx(5.0e9, rel=1e-3)
               for t in ticks[5:] for lk in t.links)
    assert all(d.mig_enabled is False for t in ticks[1:] for d in t.devices)


def test_limits_pcie_link_ecc_and_remapped_rows_every_15_s_the_margin_every_slow_tick() -> None:
    snaps = []
    for t in range(31):  # counts that grow each second, a limit lowered each second
        s = node(1, time=1000.0 + t)
        snaps.append(dataclasses.replace(s, devices=tuple(dataclasses.replace(
            d, ecc_corrected=t, power_limit=700.0 - t, pcie_replays=t, temp_margin=40.0 - t)
            for d in s.devices)))
    ticks, fake, _ = run(snaps, slow_interval=5)
    for call in ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPersistenceMode",
                 "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
                 "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetRemappedRows"):
        assert fake.calls[call] == 3, call  # at 0, 15 and 30 s
    devs = [t.devices[0] for t in ticks]
    assert [d.ecc_corrected for d in devs] == [t - t % 15 for t in range(31)]
    assert [d.pcie_replays for d in devs] == [t - t % 15 for t in range(31)]
    assert [d.power_limit for d in devs] == [700.0 - (t - t % 15) for t in range(31)]
    # What moves with the load is read every slow tick.
    assert fake.calls["nvmlDeviceGetMarginTemperature"] == 7
    assert [d.temp_margin for d in devs] == [40.0 - (t - t % 5) for t in range(31)]


def test_topology_matrix_names_nvlink_through_nvswitch() -> None:
    _, _, src = run([node(4, links=18)])
    assert src.topology is not None
    assert src.topology.matrix[0] == ("X", "NV18", "NV18", "NV18")
    assert src.topology.cpu_affinity[0] == "0-51"


def test_pcie_only_pairs_use_the_common_ancestor() -> None:
    snap = node(2)
    snap = dataclasses.replace(snap, topology=dataclasses.replace(
        snap.topology, matrix=(("X", "PHB"), ("PHB", "X"))))
    _, _, src = run([snap])
    assert src.topology.matrix == (("X", "PHB"), ("PHB", "X"))


def test_an_unsupported_metric_is_not_asked_again() -> None:
    _, fake, _ = run(series(5), faults=[Fault("nvmlDeviceGetPowerUsage", NOT_SUPPORTED)])
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 2  # once per GPU, then never
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 2


def test_a_metric_needing_privileges_says_so_and_is_not_asked_again() -> None:
    ticks, fake, _ = run(series(4), faults=[Fault("nvmlGpmQueryDeviceSupport", NO_PERMISSION)])
    d = ticks[-1].devices[0]
    assert d.sm_active == Missing("no_permission")
    assert fake.calls["nvmlGpmQueryDeviceSupport"] == 2


def test_a_passing_error_is_asked_again_next_tick() -> None:
    ticks, fake, _ = run(series(3), faults=[Fault("nvmlDeviceGetPowerUsage", TIMEOUT, after=0)])
    assert ticks[0].devices[0].power_draw.reason == "error"
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 6


def test_a_gpu_that_falls_off_the_bus_is_shown_lost_and_the_others_keep_updating() -> None:
    snaps = series(6, 4)
    ticks, fake, _ = run(snaps, faults=[Fault("*", GPU_IS_LOST, device=2, after=3)])
    assert ticks[2].devices[2].lost is None
    for t in (3, 4, 5):
        lost = ticks[t].devices[2]
        assert lost.lost is not None and lost.lost.reason == "gpu_lost"
        assert lost.lost.since == snaps[3].time
        assert lost.util_gpu == Missing("gpu_lost", since=snaps[3].time)
        assert lost.name == "NVIDIA H100 80GB HBM3"  # still named, so the user knows which
        assert [d.util_gpu for i, d in enumerate(ticks[t].devices) if i != 2] == \
            [snaps[t].devices[i].util_gpu for i in (0, 1, 3)]
        assert all(p.device_index != 2 for p in ticks[t].processes)
    assert any("GPU 2" in w and "fell off the bus" in w for w in ticks[3].warnings)
    assert not ticks[4].warnings  # said once
    calls_after_loss = fake.calls["nvmlDeviceGetUtilizationRates"]
    assert calls_after_loss == 3 * 4 + 3 * 3  # GPU 2 is not asked again once lost


@pytest.mark.parametrize("code, cls, words", [
    (LIBRARY_NOT_FOUND, BackendUnavailable, "libnvidia-ml.so.1) not found"),
    (DRIVER_NOT_LOADED, BackendUnavailable, "driver is not loaded"),
    (NO_PERMISSION, BackendUnavailable, "no permission"),
    (MISMATCH, DriverMismatch, "driver/library version mismatch: the driver was upgraded"),
])
def test_init_failures_say_what_to_do(code: int, cls: type, words: str) -> None:
    with FakeNvml(series(1), faults=[Fault("nvmlInitWithFlags", code)]), \
            pytest.raises(cls) as e:
        NvmlSource().open()
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_no_gpu_is_a_clear_error() -> None:
    empty = dataclasses.replace(node(1), devices=(), processes=())
    with FakeNvml([empty]), pytest.raises(BackendUnavailable, match="no NVIDIA GPU found"):
        NvmlSource().open()


def test_windows_wddm_process_memory_is_unsupported_not_zero() -> None:
    snap = node(1)
    snap = dataclasses.replace(snap, processes=(ProcessSample(
        pid=4242, device_index=0, kind="graphics", gpu_mem=Missing("unsupported"),
        sm_util=0.0, mem_util=0.0),))
    ticks, _, _ = run([snap])
    (p,) = ticks[0].processes
    assert p.kind == "graphics"
    assert p.gpu_mem.reason == "unsupported"


def test_an_old_driver_without_v3_process_calls_falls_back_to_v2() -> None:
    ticks, fake, _ = run(series(2), faults=[
        Fault("nvmlDeviceGetComputeRunningProcesses_v3", FUNCTION_NOT_FOUND)])
    assert [p.pid for p in ticks[-1].processes] == [1000, 1001]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] >= 2


def test_process_lists_take_one_driver_call_per_gpu_and_kind() -> None:
    # The binding's wrapper asks the count first, then the entries: two calls where one does.
    ticks, fake, _ = run(series(3))
    assert [p.pid for p in ticks[-1].processes] == [1000, 1001]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2 * 3
    assert fake.calls["nvmlDeviceGetGraphicsRunningProcesses_v3"] == 2 * 3


def test_more_processes_than_first_asked_for_are_all_listed() -> None:
    many = tuple(ProcessSample(pid=5000 + i, device_index=0, kind="compute",
                               gpu_mem=(i + 1) * GIB, sm_util=0.0, mem_util=0.0)
                 for i in range(40))
    snaps = [dataclasses.replace(s, processes=many) for s in series(3)]
    ticks, fake, _ = run(snaps)
    for tick in ticks:
        assert [(p.pid, p.gpu_mem, p.kind) for p in tick.processes if p.device_index == 0] == [
            (5000 + i, (i + 1) * GIB, "compute") for i in range(40)]
    # Too small once (the first tick), then asked at the size the driver needed.
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2 * 3 + 1


def test_process_use_takes_one_driver_call_per_gpu_and_slow_tick() -> None:
    # The binding's wrapper asks the count first, then the samples: two calls of 1.4 ms each.
    ticks, fake, _ = run(series(3))
    assert [(p.pid, p.sm_util, p.mem_util) for p in ticks[-1].processes] == [
        (1000, 80.0, 25.0), (1001, 80.0, 25.0)]
    assert fake.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 2 * 3


def test_process_use_is_not_asked_of_a_gpu_without_processes() -> None:
    snaps = [dataclasses.replace(s, processes=tuple(p for p in s.processes if p.device_index))
             for s in series(3)]  # GPU 0 idle, GPU 1 training
    ticks, fake, _ = run(snaps)
    assert [(p.pid, p.device_index, p.sm_util) for p in ticks[-1].processes] == [(1001, 1, 80.0)]
    # Both GPUs at the first slow tick (before a poll found their processes), then GPU 1 alone.
    assert fake.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 2 + 2
    # A process that comes to the idle GPU is asked for from the next slow tick on.
    back = [*snaps, *series(3, start=snaps[-1].time + 1)]
    ticks, fake, _ = run(back)
    assert [(p.pid, p.sm_util) for p in ticks[-1].processes] == [(1000, 80.0), (1001, 80.0)]


@pytest.mark.parametrize("call", ["nvmlDeviceGetProcessesUtilizationInfo",
                                  "nvmlDeviceGetProcessUtilization"])
def test_process_use_of_more_processes_than_first_asked_for(call: str) -> None:
    many = tuple(ProcessSample(pid=5000 + i, device_index=0, kind="compute", gpu_mem=GIB,
                               sm_util=float(1 + i), mem_util=float(i % 7)) for i in range(40))
    snaps = [dataclasses.replace(s, processes=many) for s in series(3)]
    faults = ([Fault("nvmlDeviceGetProcessesUtilizationInfo", FUNCTION_NOT_FOUND)]
              if call == "nvmlDeviceGetProcessUtilization" else [])
    ticks, fake, _ = run(snaps, faults=faults)
    for tick in ticks:
        assert [(p.pid, p.sm_util, p.mem_util) for p in tick.processes
                if p.device_index == 0] == [(5000 + i, float(1 + i), float(i % 7))
                                             for i in range(40)]
    # Too small once (the first tick), then asked at the size the driver needed; the idle
    # GPU 1 at the first tick only, before a poll found it without processes.
    assert fake.calls[call] == 3 + 1 + 1


def test_process_use_reads_what_the_bindings_wrappers_read() -> None:
    import pynvml

    with FakeNvml(series(2)) as fake:
        src = NvmlSource(slow_interval=0)
        src.open()
        try:
            for dev in src.devices:
                for ours, theirs in (
                        (_processes_utilization, pynvml.nvmlDeviceGetProcessesUtilizationInfo),
                        (_process_utilization, pynvml.nvmlDeviceGetProcessUtilization)):
                    got = ours(pynvml, dev.handle, 0, {})
                    want = theirs(dev.handle, 0)
                    assert [(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in got] == [
                        (s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in want] != []
                    with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer: as theirs
                        ours(pynvml, dev.handle, want[0].timeStamp, {})
            fake.advance()
        finally:
            src.close()


def test_an_old_driver_without_memory_v2_reports_used_including_reserved() -> None:
    ticks, _, _ = run(series(1), faults=[Fault("nvmlDeviceGetMemoryInfo_v2", FUNCTION_NOT_FOUND)])
    d = ticks[0].devices[0]
    assert d.mem_used == 10 * GIB + H100_RESERVED
    assert d.mem_reserved.reason == "unsupported"


def test_mig_devices_and_their_processes() -> None:
    migs = (MigDevice(gpu_instance=1, compute_instance=0, uuid="MIG-a", name="1g.10gb",
                      mem_total=10 * GIB, mem_used=2 * GIB),
            MigDevice(gpu_instance=2, compute_instance=0, uuid="MIG-b", name="3g.40gb",
                      mem_total=40 * GIB, mem_used=20 * GIB))
    dev = h100(0, mig_enabled=True, mig_devices=migs, util_gpu=Missing("unsupported"))
    procs = (ProcessSample(pid=7, device_index=0, gpu_mem=GIB, sm_util=Missing("unsupported"),
                           gpu_instance=2, compute_instance=0),)
    snap = dataclasses.replace(node(1), devices=(dev,), processes=procs)
    ticks, _, _ = run([snap])
    d = ticks[0].devices[0]
    assert d.mig_enabled is True
    assert [(m.gpu_instance, m.name, m.mem_used) for m in d.mig_devices] == [
        (1, "1g.10gb", 2 * GIB), (2, "3g.40gb", 20 * GIB)]
    assert d.util_gpu.reason == "unsupported" and "MIG" in d.util_gpu.detail
    (p,) = ticks[0].processes
    assert (p.pid, p.gpu_instance, p.compute_instance) == (7, 2, 0)


def test_idle_processes_get_zero_sm_not_missing() -> None:
    snap = node(1)
    snap = dataclasses.replace(snap, processes=(dataclasses.replace(snap.processes[0],
                                                                    sm_util=0.0),))
    ticks, _, _ = run([snap])  # NVML answers NotFound: nobody used the GPU
    assert ticks[0].processes[0].sm_util == 0.0


def test_gpm_is_off_on_pre_hopper_gpus_and_pcie_falls_back_to_throughput() -> None:
    from gputop.sources.nvml import PCIE_THROUGHPUT_EVERY_S

    snaps = [node(1, time=1000.0 + t, sm_active=Missing("unsupported"),
                  gr_active=Missing("unsupported")) for t in (0, 1, PCIE_THROUGHPUT_EVERY_S)]
    ticks, fake, _ = run(snaps)
    d = ticks[-1].devices[0]
    assert d.sm_active.reason == "unsupported"
    assert d.pcie_rx == pytest.approx(2.0e9, rel=1e-3)
    assert ticks[1].devices[0].pcie_rx == ticks[0].devices[0].pcie_rx  # kept in between
    # tx and rx, on the first slow tick and PCIE_THROUGHPUT_EVERY_S later: each call blocks
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 4


def test_in_the_background_the_first_poll_has_process_use_pending_then_measured() -> None:
    # The dashboard's first poll does not wait for the slow calls: a process's SM use is not
    # known yet, which is not 0 %.
    snaps = [node(2, time=1000.0 + t) for t in range(3)]
    with FakeNvml(snaps) as fake:
        src = NvmlSource(background=True)
        src.open()
        first = src.poll(1000.0)
        assert src._slow_thread is not None
        src._slow_thread.join()
        fake.advance()
        second = src.poll(1001.0)
        src.close()
    assert {(p.sm_util, p.mem_util) for p in first.processes} == {(Missing("pending"),) * 2}
    assert {(p.sm_util, p.mem_util) for p in second.processes} == {(80.0, 25.0)}


def test_the_first_slow_tick_after_prime_has_pcie_throughput_and_the_rest() -> None:
    # Before Hopper, no GPM: PCIe traffic comes from the blocking throughput call.
    snaps = [node(2, time=1000.0 + t, sm_active=Missing("unsupported"),
                  gr_active=Missing("unsupported")) for t in range(2)]
    with FakeNvml(snaps) as fake:
        src = NvmlSource()
        src.open()
        src.prime(1000.0)
        tick = src.poll(1000.2)
        src.close()
    for d in tick.devices:
        assert d.pcie_rx == pytest.approx(snaps[0].devices[d.index].pcie_rx, rel=1e-3)
        assert d.power_limit == snaps[0].devices[d.index].power_limit
        assert d.clock_sm_max == snaps[0].devices[d.index].clock_sm_max
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2 * 2  # tx and rx of each GPU, once


def test_prime_makes_the_first_call_of_each_fast_entry_point_on_one_gpu_only() -> None:
    # The driver's first call of an entry point after nvmlInit is its slow one: prime pays it
    # while --once waits for its rates, and the poll then asks every GPU once as usual.
    snaps = [node(3, time=1000.0 + t) for t in range(2)]
    fast = ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetTemperatureV", "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetPerformanceState", "nvmlDeviceGetCurrentClocksEventReasons")
    with FakeNvml(snaps) as fake:
        src = NvmlSource()
        src.open()
        before = {name: fake.calls[name] for name in fast}
        src.prime(1000.0)
        primed = {name: fake.calls[name] - before[name] for name in fast}
        tick = src.poll(1000.2)
        polled = {name: fake.calls[name] - before[name] - primed[name] for name in fast}
        src.close()
    assert primed == dict.fromkeys(fast, 1) and polled == dict.fromkeys(fast, 3)
    assert [d.util_gpu for d in tick.devices] == [d.util_gpu for d in snaps[0].devices]


# What a one-shot's table shows (ui.view.table), and the entry points the rest takes.
TABLE_FIELDS = ("util_gpu", "sm_active", "mem_used", "mem_total", "temp_gpu", "power_draw",
                "power_limit", "clock_sm", "throttle", "mig_enabled")
NOT_IN_THE_TABLE = ("nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetPcieThroughput",
                    "nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetEccMode",
                    "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetEncoderUtilization",
                    "nvmlDeviceGetDecoderUtilization", "nvmlDeviceGetFieldValues",
                    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
                    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkErrorCounter",
                    "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetP2PStatus",
                    "nvmlDeviceGetMarginTemperature", "nvmlDeviceGetRemappedRows")


@pytest.mark.parametrize("gpm", [True, False])
def test_a_brief_source_reads_what_a_one_shots_table_shows_and_nothing_more(gpm: bool) -> None:
    over = {} if gpm else {"sm_active": Missing("unsupported"), "gr_active": Missing("unsupported")}
    snaps = [node(2, time=1000.0 + t, links=18, **over) for t in range(2)]
    with FakeNvml(snaps) as fake:
        src = NvmlSource(brief=True)
        src.open()
        src.prime(1000.0)
        tick = src.poll(1000.2)
        fake.advance()
        src.poll(1006.0)  # a slow tick of its own, which reads the counters too: still brief
        src.close()
    for d in tick.devices:
        want = snaps[0].devices[d.index]
        for name in TABLE_FIELDS:
            got, wanted = getattr(d, name), getattr(want, name)
            if isinstance(wanted, Missing):
                got, wanted = getattr(got, "reason", got), wanted.reason
            assert got == wanted, name
        # Not read, and said so. PCIe traffic comes with GPM's samples where GPM is there.
        for name in ("clock_sm_max", "temp_slowdown", "temp_margin", "pcie_gen", "ecc_corrected",
                     "enc_util", "energy_j", "persistence_mode", *(() if gpm else ("pcie_rx",))):
            assert getattr(d, name) == Missing("pending"), name
    assert {(p.pid, p.gpu_mem, p.sm_util) for p in tick.processes} == {
        (p.pid, p.gpu_mem, p.sm_util) for p in snaps[0].processes}
    assert tick.links == [] and src.topology is None
    assert {name: fake.calls[name] for name in NOT_IN_THE_TABLE} == dict.fromkeys(
        NOT_IN_THE_TABLE, 0)


def test_a_full_source_makes_the_calls_a_brief_one_leaves_out() -> None:
    # The other side of the test above: without `brief` every one of those is asked.
    snaps = [node(2, time=1000.0 + t, links=18, sm_active=Missing("unsupported"),
                  gr_active=Missing("unsupported")) for t in range(2)]
    with FakeNvml(snaps) as fake:
        src = NvmlSource()
        src.open()
        src.prime(1000.0)
        src.poll(1000.2)
        src.close()
    assert all(fake.calls[name] > 0 for name in NOT_IN_THE_TABLE), fake.calls


def test_slow_metrics_are_read_on_the_slow_cadence_only() -> None:
    snaps = series(10)
    with FakeNvml(snaps) as fake:
        src = NvmlSource(slow_interval=5.0)
        src.open()
        for t in range(10):
            src.poll(1000.0 + t)
            fake.advance()
    assert fake.calls["nvmlDeviceGetFieldValues"] == 2 * 2  # t=0 and t=5, two GPUs
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 10 * 2


def test_lifetime_ecc_sram_and_dram_errors_and_retired_pages_read_live() -> None:
    troubled = dict(ecc_corrected=4, ecc_uncorrected=1, ecc_corrected_aggregate=19,
                    ecc_uncorrected_aggregate=3, ecc_uncorrected_sram=1, ecc_uncorrected_dram=0,
                    ecc_uncorrected_sram_aggregate=1, ecc_uncorrected_dram_aggregate=2,
                    ecc_sram_threshold_exceeded=True, retired_single_bit=1,
                    retired_double_bit=2, retire_pending=True)
    snaps = [node(1, time=1000.0 + t, **troubled) for t in range(2)]
    ticks, _, _ = run(snaps)
    d = ticks[-1].devices[0]
    assert {name: getattr(d, name) for name in troubled} == troubled
    # With ECC off the counts say why they are missing; retired pages are read all the same.
    off = [node(1, time=1000.0 + t, ecc_enabled=False, retired_single_bit=0,
                retired_double_bit=0, retire_pending=False) for t in range(2)]
    d = run(off)[0][-1].devices[0]
    assert d.ecc_uncorrected_aggregate == Missing("unsupported", detail="ECC is off")
    assert d.ecc_sram_threshold_exceeded == Missing("unsupported", detail="ECC is off")
    assert (d.retired_single_bit, d.retired_double_bit, d.retire_pending) == (0, 0, False)


def test_field_values_read_in_one_unpack_as_the_binding_reads_them() -> None:
    import pynvml

    from gputop.sources.nvml import _field_value, _field_values

    snaps = [node(2, time=1000.0 + t, links=4) for t in range(2)]
    with FakeNvml(snaps, faults=[Fault("nvmlDeviceGetFieldValues", NO_PERMISSION, device=1)]):
        src = NvmlSource(slow_interval=0)
        src.open()
        src.poll(1000.0)
        dev = src.devices[0]
        ids = dev.field_ids
        assert len(ids) > 4  # memory temperature, energy, throttle counters, 4 links x 2
        blank: dict[int, bytes] = {}
        for _ in range(2):  # built, then copied from its bytes
            got = _field_values(pynvml, dev.handle, ids, blank)
            want = [(int(v.nvmlReturn), _field_value(v), int(v.timestamp))
                    for v in pynvml.nvmlDeviceGetFieldValues(dev.handle, ids)]
            assert got == want
            assert [type(v) for _, v, _ in got] == [type(v) for _, v, _ in want]
        with pytest.raises(pynvml.NVMLError_NoPermission):
            _field_values(pynvml, src.devices[1].handle, ids, {})
        src.close()


def test_values_that_held_still_are_last_polls_objects_and_so_is_a_still_process() -> None:
    snaps = [node(2, time=1000.0 + t, util_gpu=float(50 + t)) for t in range(2)]
    with FakeNvml(snaps) as fake:
        src = NvmlSource(slow_interval=60.0)
        src.open()
        first = src.poll(1000.0)
        fake.advance()
        second = src.poll(1001.0)
        src.close()
    a, b = first.devices[0], second.devices[0]
    assert b.util_gpu == 51.0 and a.util_gpu == 50.0
    for name in ("mem_total", "mem_used", "mem_free", "temp_gpu", "power_draw", "clock_sm",
                 "clock_mem", "throttle"):
        assert getattr(b, name) == getattr(a, name)
        assert getattr(b, name) is getattr(a, name), name
    assert second.processes == first.processes
    assert all(q is p for p, q in zip(first.processes, second.processes, strict=True))
