"""The AMD source (amdsmi) against a fake amdsmi driven by recorded rocm-smi inventories.

Everything here runs the real AmdSource; only the amdsmi library underneath is a stand-in.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gputop.errors import BackendUnavailable
from gputop.model import DeviceSample, Missing, present
from gputop.sources import amd
from gputop.sources.amd import AmdSource
from gputop.sources.base import GpuTick
from gputop.testing.fake_amdsmi import (
    LINK_TYPES_7_0_2,
    LINK_TYPES_WITHOUT_INTERNAL,
    FakeAmdSmi,
    violation_status,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "amd"
MIB = 1 << 20
T0 = 1000.0


def fake(name: str, **kwargs: object) -> FakeAmdSmi:
    return FakeAmdSmi.load(FIXTURES / f"{name}.json", **kwargs)


def opened(lib: FakeAmdSmi, slow_interval: float = 0.0) -> AmdSource:
    source = AmdSource(lib, slow_interval=slow_interval)
    source.open()
    return source


def run(source: AmdSource, lib: FakeAmdSmi, ticks: int, *, every: float = 1.0) -> list[GpuTick]:
    """Polls `ticks` recorded ticks, `every` seconds apart."""
    out = []
    for k in range(ticks):
        out.append(source.poll(T0 + k * every))
        lib.advance()
    return out


def reason(v: object) -> str:
    assert isinstance(v, Missing), f"expected a Missing, got {v!r}"
    return v.reason


# ----------------------------------------------------------------------------------------------
# Values and units


def test_four_idle_mi100s_show_the_recorded_values_in_gputop_units() -> None:
    lib = fake("mi100_x4")
    source = AmdSource(lib)
    info = source.open()
    assert (info.backend, info.driver_version, info.rocm_version) == ("amdsmi", "6.3.6", "6.0.2")

    devices = source.poll(T0).devices
    assert [d.pci_bus_id for d in devices] == [
        "0000:83:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:e3:00.0"]
    gpu = devices[0]
    assert (gpu.vendor, gpu.name) == ("amd", "AMD Instinct MI100")
    assert gpu.uuid == "79ff738c-0000-1000-80cc-d55167a2124a"
    assert gpu.compute_capability == "gfx908"
    # VRAM comes in MiB: 32752 MiB is exactly the 34,342,961,152 bytes rocm-smi recorded.
    assert gpu.mem_total == 34_342_961_152
    assert gpu.mem_used == 6 * MIB
    assert gpu.mem_free == (32752 - 6) * MIB
    # The cap comes in microwatts, the draw in watts.
    assert (gpu.power_limit, gpu.power_default_limit, gpu.power_draw) == (290.0, 290.0, 36.0)
    # Junction (hotspot) is the GPU temperature; its CRITICAL threshold is the slowdown.
    assert (gpu.temp_gpu, gpu.temp_mem) == (55.0, 53.0)
    assert (gpu.temp_slowdown, gpu.temp_shutdown, gpu.temp_margin) == (105.0, 110.0, 50.0)
    assert (gpu.clock_sm, gpu.clock_sm_max, gpu.clock_mem, gpu.clock_mem_max) == (
        300, 1502, 1200, 1200)
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (4, 4, 16, 16)
    assert (gpu.util_gpu, gpu.util_mem, gpu.pcie_replays) == (0.0, 0.0, 0)
    assert (gpu.ecc_enabled, gpu.ecc_corrected, gpu.ecc_uncorrected) == (True, 0, 0)
    assert gpu.numa_node == 1
    assert gpu.throttle == ()
    assert reason(gpu.fan) == "unsupported"  # passively cooled


def test_a_training_job_shows_up_as_load_on_every_gpu() -> None:
    lib = fake("mi100_x4")
    ticks = run(opened(lib), lib, 4)
    busy = ticks[3].devices[3]
    assert busy.util_gpu == 97.0
    assert busy.mem_used == 29904 * MIB
    assert busy.power_draw == 280.0
    assert busy.clock_sm == 1502
    assert busy.temp_gpu == 77.0  # 53 °C junction when idle
    assert busy.temp_margin == 105.0 - busy.temp_gpu


def test_a_consumer_card_shows_na_as_unsupported_never_as_zero_or_text() -> None:
    lib = fake("rx6700xt_x1")
    gpu = opened(lib).poll(T0).devices[0]
    assert gpu.name == "AMD Radeon RX 6700 XT"
    assert reason(gpu.power_draw) == "unsupported"  # rocm-smi: "N/A (Secondary die)"
    assert gpu.power_limit == 211.0
    assert reason(gpu.energy_j) == "unsupported"
    assert reason(gpu.ecc_enabled) == "unsupported"
    assert reason(gpu.ecc_corrected) == "unsupported"
    assert gpu.mem_total == 12272 * MIB
    assert gpu.temp_slowdown == 110.0
    for name in DeviceSample._measured:
        assert getattr(gpu, name) != "N/A", name


def test_a_fan_speed_is_shown_as_a_percentage_of_its_maximum() -> None:
    lib = fake("rx6700xt_x1")
    lib.script(0, "amdsmi_get_gpu_fan_speed", [{"0": 0}, {"0": 128}])
    ticks = run(opened(lib), lib, 2)
    assert [t.devices[0].fan for t in ticks] == [0.0, 50.2]


def test_all_ones_placeholders_are_unsupported_and_a_dead_hotspot_falls_back_to_edge() -> None:
    lib = fake("mi100_x4")
    lib.devices[0]["amdsmi_get_temp_metric"]["HOTSPOT"]["CURRENT"] = 0xFFFF
    lib.devices[1]["amdsmi_get_clock_info"]["GFX"]["clk"] = 0xFFFFFFFF
    devices = opened(lib).poll(T0).devices
    assert (devices[0].temp_gpu, devices[0].temp_slowdown) == (53.0, 100.0)  # edge sensor
    assert reason(devices[1].clock_sm) == "unsupported"
    assert devices[1].clock_sm_max == 1502


def test_energy_comes_from_the_counter_times_its_resolution() -> None:
    lib = fake("mi210_x1")
    source = AmdSource(lib)
    info = source.open()
    assert info.rocm_version is None  # no librocm-core.so on that machine
    gpu = source.poll(T0).devices[0]
    # rocm-smi recorded 93,668,579,258,681.1 µJ for this counter.
    assert gpu.energy_j == pytest.approx(93_668_579.26, rel=1e-6)
    assert gpu.temp_gpu == 35.0


def test_a_power_cap_given_in_watts_is_not_divided_again() -> None:
    lib = fake("mi210_x1")  # virtualization hosts report caps in W, not µW (amdsmi.h)
    lib.set(0, "amdsmi_get_power_cap_info", {"power_cap": 300, "default_power_cap": 300,
                                             "dpm_cap": 1700, "min_power_cap": 0,
                                             "max_power_cap": 300})
    assert opened(lib).poll(T0).devices[0].power_limit == 300.0


# ----------------------------------------------------------------------------------------------
# Errors: unsupported, no permission, transient, lost


def test_an_unsupported_metric_is_asked_once_and_never_again() -> None:
    lib = fake("rx6700xt_x1")
    ticks = run(opened(lib, slow_interval=0), lib, 4)
    assert all(reason(t.devices[0].energy_j) == "unsupported" for t in ticks)
    assert lib.count("amdsmi_get_energy_count") == 1
    assert lib.count("amdsmi_get_violation_status") == 1
    assert lib.count("amdsmi_get_gpu_total_ecc_count") == 1
    assert lib.count("amdsmi_get_gpu_activity") == 4  # the rest is polled every tick


def test_no_permission_is_shown_as_such_and_not_asked_again() -> None:
    lib = fake("mi100_x4")
    lib.inject("amdsmi_get_power_info", "AMDSMI_STATUS_NO_PERM", device=1)
    ticks = run(opened(lib), lib, 3)
    assert [reason(t.devices[1].power_draw) for t in ticks] == ["no_permission"] * 3
    assert lib.count("amdsmi_get_power_info", device=1) == 1
    assert [t.devices[0].power_draw for t in ticks] == [36.0, 181.0, 262.0]


@pytest.mark.parametrize("status", ["AMDSMI_STATUS_BUSY", "AMDSMI_STATUS_RETRY",
                                    "AMDSMI_STATUS_TIMEOUT"])
def test_a_busy_gpu_is_an_error_for_one_tick_and_then_answers_again(status: str) -> None:
    lib = fake("mi100_x4")
    lib.inject("amdsmi_get_gpu_activity", status, device=0, from_tick=1, until_tick=2)
    ticks = run(opened(lib), lib, 3)
    hiccup = ticks[1].devices[0].util_gpu
    assert reason(hiccup) == "error"
    assert isinstance(hiccup, Missing) and status in hiccup.detail
    assert ticks[2].devices[0].util_gpu == 96.0
    assert lib.count("amdsmi_get_gpu_activity", device=0) == 3


def test_a_gpu_lost_after_three_ticks_is_marked_lost_while_the_others_keep_updating() -> None:
    lib = fake("mi100_x4")
    lib.lose_device(2, from_tick=3)
    ticks = run(opened(lib), lib, 6)

    assert all(t.devices[2].lost is None for t in ticks[:3])
    assert [len(t.devices) for t in ticks] == [4] * 6
    lost_at = T0 + 3
    for t in ticks[3:]:
        gone = t.devices[2]
        assert gone.lost == Missing("gpu_lost", since=lost_at, detail=gone.lost.detail)
        assert "NOT_FOUND" in gone.lost.detail
        assert (gone.pci_bus_id, gone.name) == ("0000:c3:00.0", "AMD Instinct MI100")
        assert all(reason(getattr(gone, f)) == "gpu_lost" for f in DeviceSample._measured)
        assert all(p.device_index != 2 for p in t.processes)
    assert len(ticks[3].warnings) == 1
    assert "GPU 2" in ticks[3].warnings[0] and "0000:c3:00.0" in ticks[3].warnings[0]
    # The other GPUs keep showing the recording, tick after tick.
    assert [t.devices[0].util_gpu for t in ticks[3:]] == [99.0, 97.0, 98.0]
    assert [t.devices[3].util_gpu for t in ticks[3:]] == [97.0, 96.0, 98.0]
    assert sorted({p.device_index for p in ticks[5].processes}) == [0, 1, 3]
    # A lost GPU is not asked again: activity was read on ticks 0-2 only.
    assert lib.count("amdsmi_get_gpu_activity", device=2) == 3


def test_an_older_amdsmi_without_a_function_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(FakeAmdSmi, "amdsmi_get_link_metrics")
    lib = fake("mi100_x4")
    tick = opened(lib).poll(T0)
    assert tick.links == []
    assert tick.devices[0].util_gpu == 0.0


# ----------------------------------------------------------------------------------------------
# Starting up


@pytest.mark.parametrize(("status", "says"), [
    ("AMDSMI_STATUS_DRIVER_NOT_LOADED", "modprobe amdgpu"),
    ("AMDSMI_STATUS_INIT_ERROR", "render"),
    ("AMDSMI_STATUS_FAIL_LOAD_MODULE", "amd-smi-lib"),
    ("AMDSMI_STATUS_NO_PERM", "render"),
    ("AMDSMI_STATUS_IO", "amd-smi list"),
])
def test_when_amdsmi_cannot_start_the_user_is_told_what_to_do(status: str, says: str) -> None:
    lib = fake("mi100_x4")
    lib.fail_init(status)
    with pytest.raises(BackendUnavailable) as caught:
        AmdSource(lib).open()
    message = str(caught.value)
    assert says in message
    assert "\n" not in message
    assert caught.value.priority == 1


@pytest.fixture
def broken_amdsmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `amdsmi` that behaves as on a machine without libamd_smi.so: it prints to stdout and
    raises KeyError. Returns the file it touches when imported."""
    imported = tmp_path / "imported"
    package = tmp_path / "amdsmi"
    package.mkdir()
    (package / "__init__.py").write_text(
        f"open({str(imported)!r}, 'w').close()\n"
        "print('/opt/rocm/lib/libamd_smi.so: cannot open shared object file')\n"
        "print('Unable to find libamd_smi.so library try installing amd-smi-lib')\n"
        "raise KeyError('libamd_smi.so')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    return imported


def test_when_amdsmi_cannot_be_imported_open_fails_quietly(
        broken_amdsmi: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(amd, "amd_gpu_present", lambda: True)
    with pytest.raises(BackendUnavailable) as caught:
        AmdSource().open()
    assert broken_amdsmi.exists()
    assert isinstance(caught.value.__cause__, KeyError)
    assert "amdsmi library cannot be loaded" in str(caught.value)
    assert capsys.readouterr() == ("", "")


def test_without_an_amd_gpu_amdsmi_is_not_even_imported(
        broken_amdsmi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amd, "amd_gpu_present", lambda: False)
    with pytest.raises(BackendUnavailable) as caught:
        AmdSource().open()
    assert str(caught.value) == "no AMD GPU found"
    assert caught.value.priority == 0
    assert not broken_amdsmi.exists()


def test_an_amd_gpu_is_found_by_kfd_or_by_its_pci_vendor(tmp_path: Path) -> None:
    kfd, pci = tmp_path / "kfd", tmp_path / "pci"
    for dev, vendor in (("0000:00:01.0", "0x1022"), ("0000:01:00.0", "0x10de")):
        (pci / dev).mkdir(parents=True)
        (pci / dev / "vendor").write_text(vendor + "\n")
    assert not amd.amd_gpu_present(str(kfd), str(pci))  # AMD CPU + NVIDIA GPU
    (pci / "0000:03:00.0").mkdir()
    (pci / "0000:03:00.0" / "vendor").write_text("0x1002\n")
    assert amd.amd_gpu_present(str(kfd), str(pci))
    kfd.touch()
    assert amd.amd_gpu_present(str(kfd), str(tmp_path / "nothing"))


def test_close_shuts_amdsmi_down_once() -> None:
    lib = fake("mi210_x1")
    source = opened(lib)
    source.close()
    source.close()
    assert lib.count("amdsmi_shut_down") == 1
    assert not lib.initialized


# ----------------------------------------------------------------------------------------------
# Cadence


def test_static_facts_are_read_once_and_slow_calls_only_on_the_slow_cadence() -> None:
    lib = fake("mi100_x4")
    run(opened(lib, slow_interval=5.0), lib, 6)  # t = 0..5 s: slow ticks at 0 and 5
    assert lib.count("amdsmi_get_power_cap_info", device=0) == 1
    assert lib.count("amdsmi_get_gpu_device_uuid", device=0) == 1
    assert lib.count("amdsmi_get_pcie_info", device=0) == 1 + 2  # open, then two slow ticks
    assert lib.count("amdsmi_get_gpu_metrics_info", device=0) == 2
    assert lib.count("amdsmi_get_gpu_activity", device=0) == 6


# ----------------------------------------------------------------------------------------------
# Processes


def test_process_gpu_percent_is_engine_time_over_wall_time_between_polls() -> None:
    lib = fake("mi100_x4")
    lib.advance()  # the job starts at tick 1
    ticks = run(opened(lib), lib, 3)
    first, second, third = ([p for p in t.processes if p.device_index == 0] for t in ticks)
    assert [p.pid for p in first] == [48211]
    assert reason(first[0].sm_util) == "pending"  # needs two samples
    assert second[0].sm_util == pytest.approx(96.0)
    assert third[0].sm_util == pytest.approx(99.0)
    assert second[0].gpu_mem == (29904 - 6) * MIB
    assert second[0].kind == "compute"


def test_process_gpu_percent_uses_the_real_time_between_polls() -> None:
    lib = fake("mi100_x4")
    lib.advance()
    ticks = run(opened(lib), lib, 2, every=2.0)  # 0.96 s of engine time in 2 s
    assert ticks[1].processes[0].sm_util == pytest.approx(48.0)


# ----------------------------------------------------------------------------------------------
# Throttling


def test_mi300_violation_flags_name_the_throttle_reasons() -> None:
    lib = fake("mi100_x4")
    lib.set(0, "amdsmi_get_violation_status",
            violation_status(active=("ppt_pwr", "socket_thrm"),
                             percent={"ppt_pwr": 40, "socket_thrm": 12}))
    gpu = opened(lib).poll(T0).devices[0]
    assert gpu.throttle == ("sw_thermal", "board_limit")
    assert lib.count("amdsmi_get_gpu_metrics_info", device=0) == 0


def test_a_bare_throttled_flag_is_not_turned_into_a_made_up_reason() -> None:
    lib = fake("mi100_x4")
    lib.script(0, "amdsmi_get_gpu_metrics_info", [{"throttle_status": False},
                                                  {"throttle_status": True}])
    ticks = run(opened(lib), lib, 2)
    assert ticks[0].devices[0].throttle == ()
    throttled = ticks[1].devices[0].throttle
    assert reason(throttled) == "unsupported"
    assert isinstance(throttled, Missing) and "does not say why" in throttled.detail


# ----------------------------------------------------------------------------------------------
# Topology and xGMI


def test_the_recorded_pcie_topology_reads_like_nvidia_smi_topo() -> None:
    lib = fake("mi100_x4")
    source = opened(lib)
    assert source.topology is not None
    assert source.topology.matrix == (
        ("X", "NODE", "NODE", "NODE"),
        ("NODE", "X", "NODE", "NODE"),
        ("NODE", "NODE", "X", "NODE"),
        ("NODE", "NODE", "NODE", "X"),
    )
    assert source.topology.numa_affinity == ("1", "1", "1", "1")
    assert lib.count("amdsmi_topo_get_link_type") == 6  # each pair once, at open
    source.poll(T0)
    assert lib.count("amdsmi_topo_get_link_type") == 6


def test_gpus_on_another_socket_are_sys() -> None:
    lib = fake("mi100_x4")
    lib.set(3, "amdsmi_topo_get_numa_node_number", 0)
    lib.set_link(0, 1, hops=3, link_type="AMDSMI_LINK_TYPE_PCIE")
    matrix = opened(lib).topology.matrix  # type: ignore[union-attr]
    assert matrix[0][1] == "SYS"  # three hops: across the socket interconnect
    assert [matrix[3][j] for j in range(3)] == ["SYS"] * 3  # other NUMA node
    assert matrix[1][2] == "NODE"


@pytest.mark.parametrize("numbering", [LINK_TYPES_7_0_2, LINK_TYPES_WITHOUT_INTERNAL],
                         ids=["amdsmi-7.0.2", "without-INTERNAL"])
def test_xgmi_is_recognised_by_the_library_enum_not_by_a_number(numbering: dict) -> None:
    lib = fake("mi100_x4", link_types=numbering)
    lib.set_link(0, 1, hops=1, link_type="AMDSMI_LINK_TYPE_XGMI")
    matrix = opened(lib).topology.matrix  # type: ignore[union-attr]
    assert (matrix[0][1], matrix[1][0]) == ("XGMI", "XGMI")
    assert matrix[0][2] == "NODE"


def _xgmi_link(peer: str, read_kb: int, write_kb: int, link_type: str = "AMDSMI_LINK_TYPE_XGMI",
               ) -> dict[str, object]:
    return {"bdf": peer, "bit_rate": 25, "max_bandwidth": 25, "link_type": link_type,
            "read": read_kb, "write": write_kb}


def test_xgmi_link_rates_come_from_the_cumulative_kb_counters() -> None:
    lib = fake("mi100_x4")  # as if the four MI100s had an Infinity Fabric bridge
    lib.script(0, "amdsmi_get_link_metrics", [
        {"num_links": 2, "links": [_xgmi_link("0000:a3:00.0", 1_000_000, 500_000),
                                   _xgmi_link("0000:c3:00.0", 7_000, 7_000)]},
        {"num_links": 2, "links": [_xgmi_link("0000:a3:00.0", 3_048_000, 1_524_000),
                                   _xgmi_link("0000:c3:00.0", 7_000, 7_000)]},
    ])
    ticks = run(opened(lib), lib, 2, every=2.0)

    first = [lk for lk in ticks[0].links if lk.device_index == 0]
    assert [reason(lk.rx) for lk in first] == ["pending", "pending"]
    busy, idle = (lk for lk in ticks[1].links if lk.device_index == 0)
    assert (busy.kind, busy.link, busy.remote_bus_id, busy.remote_kind) == (
        "xgmi", 0, "0000:a3:00.0", "gpu")
    assert busy.rx == pytest.approx(2_048_000 * 1024 / 2)  # 1 GiB/s
    assert busy.tx == pytest.approx(1_024_000 * 1024 / 2)
    assert busy.speed == pytest.approx(25e9 / 8)
    assert busy.up is True
    assert (idle.rx, idle.tx) == (0.0, 0.0)
    assert all(lk.device_index == 0 for lk in ticks[1].links)  # the others have no counters


def test_only_xgmi_entries_of_the_link_metrics_become_links() -> None:
    lib = fake("mi100_x4")
    lib.set(1, "amdsmi_get_link_metrics", {"num_links": 2, "links": [
        _xgmi_link("0000:83:00.0", 10, 10),
        _xgmi_link("0000:00:00.0", 10, 10, link_type="AMDSMI_LINK_TYPE_PCIE")]})
    links = opened(lib).poll(T0).links
    assert [(lk.device_index, lk.link, lk.remote_bus_id) for lk in links] == [
        (1, 0, "0000:83:00.0")]
    assert present(links[0].speed)
